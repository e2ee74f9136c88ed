"""Hostile environments and what the engine does with them (issue 12)."""

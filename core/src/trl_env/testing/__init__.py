"""Test helpers for trl-env and for plugin authors: conformance checks and fake distributions."""

"""Phi processors for trl-env: ``phi3`` (Phi-3 mini/medium) and ``phi3.5`` (Phi-3.5 mini)."""

from __future__ import annotations

from .phi3 import Phi3Processor, Phi35Processor

__all__ = ["Phi3Processor", "Phi35Processor"]

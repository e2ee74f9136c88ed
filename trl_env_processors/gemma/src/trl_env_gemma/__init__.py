"""Gemma processors for trl-env: ``gemma2`` and ``gemma3``."""

from __future__ import annotations

from .gemma2 import Gemma2Processor
from .gemma3 import Gemma3Processor

__all__ = ["Gemma2Processor", "Gemma3Processor"]

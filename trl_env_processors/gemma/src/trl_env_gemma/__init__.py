"""Gemma processors for trl-env: ``gemma2``, ``gemma3`` and ``gemma4`` (option ``thinking``)."""

from __future__ import annotations

from .gemma2 import Gemma2Processor
from .gemma3 import Gemma3Processor
from .gemma4 import Gemma4Processor

__all__ = ["Gemma2Processor", "Gemma3Processor", "Gemma4Processor"]

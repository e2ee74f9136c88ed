"""Llama 3 processors for trl-env: ``llama3.1`` (also 3.3) and ``llama3.2``."""

from __future__ import annotations

from .llama3_1 import Llama31Processor
from .llama3_2 import Llama32Processor

__all__ = ["Llama31Processor", "Llama32Processor"]

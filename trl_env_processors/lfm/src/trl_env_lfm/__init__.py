"""LiquidAI processors for trl-env: ``lfm2`` and ``lfm2.5``."""

from __future__ import annotations

from .lfm2 import LFM2Processor, LFM25Processor

__all__ = ["LFM2Processor", "LFM25Processor"]

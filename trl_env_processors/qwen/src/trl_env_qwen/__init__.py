"""Qwen processors for trl-env: ``qwen2.5`` and ``qwen3`` (option ``thinking``).

Importing this package is light: transformers is only needed for ``parse_response``.
"""

from __future__ import annotations

from .qwen2_5 import Qwen25Processor
from .qwen3 import Qwen3Processor

__all__ = ["Qwen3Processor", "Qwen25Processor"]

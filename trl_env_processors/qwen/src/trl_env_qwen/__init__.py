"""Qwen processors for trl-env: ``qwen2.5``, ``qwen3``, ``qwen3.5``, ``qwen3.6`` (option
``thinking``) and ``qwen3.8`` (``thinking``, ``reasoning_effort``).

Importing this package is light: transformers is only needed for ``parse_response``.
"""

from __future__ import annotations

from .qwen2_5 import Qwen25Processor
from .qwen3 import Qwen3Processor
from .qwen3_5 import Qwen35Processor, Qwen36Processor, Qwen38Processor

__all__ = [
    "Qwen3Processor",
    "Qwen25Processor",
    "Qwen35Processor",
    "Qwen36Processor",
    "Qwen38Processor",
]

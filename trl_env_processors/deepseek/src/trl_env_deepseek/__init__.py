"""The DeepSeek-R1-Distill processor for trl-env: ``deepseek-r1``.

Importing this package is light: transformers is only needed for ``parse_response``.
"""

from __future__ import annotations

from .r1 import DeepSeekR1Processor

__all__ = ["DeepSeekR1Processor"]

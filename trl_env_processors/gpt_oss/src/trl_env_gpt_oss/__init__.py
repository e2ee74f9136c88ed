"""The gpt-oss processor for trl-env: ``gpt-oss`` (OpenAI's harmony format)."""

from __future__ import annotations

from .harmony import GptOssProcessor

__all__ = ["GptOssProcessor"]

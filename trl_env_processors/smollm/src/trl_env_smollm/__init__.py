"""SmolLM2 Instruct for trl-env: the ``smollm2`` processor.

Importing this package is light: the template is read from a file shipped beside it.
"""

from __future__ import annotations

from .smollm2 import TEMPLATE, SmolLM2Processor

__all__ = ["TEMPLATE", "SmolLM2Processor"]

"""Llama 3.2 Instruct (template ``llama3_2``)."""

from __future__ import annotations

from typing import ClassVar

from ._llama3 import Llama3Processor


class Llama32Processor(Llama3Processor):
    """Llama 3.2: the system block carries today's date unless ``date_string`` is given.

    Pass a fixed ``date_string`` for reproducible prompts: otherwise they change every day.
    """

    name: ClassVar[str] = "llama3.2"
    chat_template: ClassVar[str] = "llama3_2"
    default_date: ClassVar[str | None] = None

"""Llama 3.1 and 3.3 Instruct (template ``llama3_1``)."""

from __future__ import annotations

from typing import ClassVar

from ._llama3 import Llama3Processor


class Llama31Processor(Llama3Processor):
    """Llama 3.1 / 3.3: the system block carries a fixed date unless ``date_string`` is given."""

    name: ClassVar[str] = "llama3.1"
    chat_template: ClassVar[str] = "llama3_1"
    default_date: ClassVar[str | None] = "26 Jul 2024"  # the template's own default

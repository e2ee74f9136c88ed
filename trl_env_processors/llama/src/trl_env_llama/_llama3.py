"""The Llama 3 header format shared by 3.1/3.3 and 3.2."""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from trl_env.parsing import function_of, parse_completion, to_json
from trl_env.tiny import LLAMA3_PATTERN, TinySpec

BOS, END_OF_TEXT, PAD = "<|begin_of_text|>", "<|end_of_text|>", "<|finetune_right_pad_id|>"
EOT, EOM, PYTHON_TAG = "<|eot_id|>", "<|eom_id|>", "<|python_tag|>"
START_HEADER, END_HEADER = "<|start_header_id|>", "<|end_header_id|>"
DATE_FORMAT = "%d %b %Y"


def header(role: str) -> str:
    return f"{START_HEADER}{role}{END_HEADER}\n\n"


def render_tool_call(call: dict[str, Any]) -> str:
    """One call as the Llama 3 templates render ``tool_calls``: a bare JSON object."""
    name, arguments = function_of(call)
    return f'{{"name": "{name}", "parameters": {to_json(arguments)}}}'


class Llama3Processor:
    """Llama 3 Instruct: ``<|start_header_id|>role<|end_header_id|>\\n\\n{text|trim}<|eot_id|>``.

    The templates trim message text, so user and system text are trimmed here too; the model's own
    turns are kept as sampled (a turn that starts or ends with whitespace is the one difference).
    """

    name: ClassVar[str]
    chat_template: ClassVar[str]
    default_date: ClassVar[str | None]

    # <|eom_id|> ends a turn that called a built-in tool.
    stop_tokens: tuple[str, ...] = (EOT, EOM)
    turn_close = EOT
    turn_separator = ""

    def __init__(self, tokenizer: Any = None, date_string: str | None = None) -> None:
        if date_string is not None and not isinstance(date_string, str):
            raise TypeError(f"date_string must be text like '26 Jul 2024', not {date_string!r}")
        self.tokenizer = tokenizer
        self.date_string = date_string or self.default_date

    @property
    def today(self) -> str:
        """The date in the system block; without one, today's, like the template's strftime_now."""
        return self.date_string or datetime.now().strftime(DATE_FORMAT)

    @property
    def template_kwargs(self) -> dict[str, Any]:
        return {"date_string": self.date_string} if self.date_string else {}

    def init_system_input(self, prompt: str) -> str:
        """BOS and the system block, which the templates write even without a system message."""
        block = f"Cutting Knowledge Date: December 2023\nToday Date: {self.today}\n\n"
        return f"{BOS}{header('system')}{block}{prompt.strip()}{EOT}"

    def append_user_input(self, prompt: str) -> str:
        return f"{header('user')}{prompt.strip()}{EOT}{header('assistant')}"

    def parse_agent_output(self, completion: str) -> tuple[str, str]:
        return parse_completion(
            completion,
            ends=(*self.stop_tokens, END_OF_TEXT),
            tokenizer=self.tokenizer,
            prefix=header("assistant"),
            render_tool_call=render_tool_call,
        )

    @property
    def tiny_spec(self) -> TinySpec:
        return TinySpec(
            family=self.name,
            model_type="llama",
            chat_template=self.chat_template,
            bos_token=BOS,
            eos_token=EOT,
            pad_token=PAD,
            add_bos_token=True,
            special_tokens=(BOS, END_OF_TEXT, START_HEADER, END_HEADER, EOT, EOM, PYTHON_TAG, PAD),
            split_pattern=LLAMA3_PATTERN,
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(date_string={self.date_string!r})"

"""The Llama 3 header format shared by 3.1/3.3 and 3.2."""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from trl_env.chat_format import ChatFormat
from trl_env.parsing import function_of, to_json
from trl_env.tiny import BPE_WHITESPACE_TOKENS, TinySpec

BOS, END_OF_TEXT, PAD = "<|begin_of_text|>", "<|end_of_text|>", "<|finetune_right_pad_id|>"
EOT, EOM, PYTHON_TAG = "<|eot_id|>", "<|eom_id|>", "<|python_tag|>"
START_HEADER, END_HEADER = "<|start_header_id|>", "<|end_header_id|>"
DATE_FORMAT = "%d %b %Y"

# The real tokenizer's pre-tokenizer split (tiktoken style; digits grouped 1-3 per token).
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Whitespace the real vocabulary writes as one token: a model turn that starts with a newline
# after the header's "\n\n" re-tokenizes as one "\n\n\n" token.
SINGLE_TOKENS = BPE_WHITESPACE_TOKENS

TINY = TinySpec(
    model_type="llama",
    split_pattern=LLAMA3_PATTERN,
    bos_token=BOS,
    eos_token=EOT,
    pad_token=PAD,
    add_bos_token=True,
    # In the real vocabulary's order.
    special_tokens=(BOS, END_OF_TEXT, PAD, START_HEADER, END_HEADER, EOM, EOT, PYTHON_TAG),
    single_tokens=SINGLE_TOKENS,
    words=("system", "user", "assistant", "Cutting", "Knowledge", "Date", "Today", "December"),
    # The instruct models' generation_config ends a reply at any of the three.
    eos_tokens=(END_OF_TEXT, EOM, EOT),
)


class Llama3Processor(ChatFormat):
    """Llama 3 Instruct: ``<|start_header_id|>role<|end_header_id|>\\n\\n{text|trim}<|eot_id|>``.

    The templates trim message text, so user and system text are trimmed here too; the model's own
    turns are kept as sampled (a turn that starts or ends with whitespace is the one difference).
    """

    default_date: ClassVar[str | None]

    role_header = f"{START_HEADER}{{role}}{END_HEADER}\n\n"
    turn_end = EOT
    # <|eom_id|> ends a turn that called a built-in tool.
    stop_tokens = (EOT, EOM)
    extra_ends = (END_OF_TEXT,)
    bos = BOS
    always_system = True  # the templates write the system block even without a system message
    trim = True
    tiny = TINY

    def __init__(self, tokenizer: Any = None, date_string: str | None = None) -> None:
        if date_string is not None and not isinstance(date_string, str):
            raise TypeError(f"date_string must be text like '26 Jul 2024', not {date_string!r}")
        super().__init__(tokenizer)
        self.date_string = date_string or self.default_date

    @property
    def today(self) -> str:
        """The date in the system block; without one, today's, like the template's strftime_now."""
        return self.date_string or datetime.now().strftime(DATE_FORMAT)

    @property
    def template_kwargs(self) -> dict[str, Any]:
        return {"date_string": self.date_string} if self.date_string else {}

    def system_text(self, prompt: str) -> str:
        return (
            f"Cutting Knowledge Date: December 2023\nToday Date: {self.today}\n\n{prompt.strip()}"
        )

    def render_tool_call(self, call: dict[str, Any]) -> str:
        """One call as the Llama 3 templates render ``tool_calls``: a bare JSON object."""
        name, arguments = function_of(call)
        return f'{{"name": "{name}", "parameters": {to_json(arguments)}}}'

    def __repr__(self) -> str:
        return f"{type(self).__name__}(date_string={self.date_string!r})"

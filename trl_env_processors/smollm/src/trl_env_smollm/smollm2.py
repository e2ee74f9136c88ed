"""SmolLM2 Instruct (135M, 360M, 1.7B): ChatML with a default system turn of its own.

trl ships no template for SmolLM2; the one it equals is the template embedded in the model
(``tokenizer.chat_template`` of its GGUF file or checkpoint), kept verbatim in
``smollm2.jinja`` so the offline tiny model carries it too.
"""

from __future__ import annotations

from importlib import resources

from trl_env.chat_format import ChatFormat
from trl_env.tiny import BPE_WHITESPACE_TOKENS, TinySpec

ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
# The real vocabulary's special tokens, in its order (ids 0-16).
SPECIAL_TOKENS = (
    ENDOFTEXT,
    IM_START,
    IM_END,
    "<repo_name>",
    "<reponame>",
    "<file_sep>",
    "<filename>",
    "<gh_stars>",
    "<issue_start>",
    "<issue_comment>",
    "<issue_closed>",
    "<jupyter_start>",
    "<jupyter_text>",
    "<jupyter_code>",
    "<jupyter_output>",
    "<jupyter_script>",
    "<empty_output>",
)
TEMPLATE = (resources.files(__package__) / "smollm2.jinja").read_text(encoding="utf-8")

# GPT-2's byte-level pipeline, as transformers loads the model's tokenizer: its split never
# joins punctuation with a newline, so of the usual whitespace runs only these are one token.
BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True}
PIPELINE = {
    "normalizer": None,
    "pre_tokenizer": {**BYTE_LEVEL, "use_regex": True},
    "decoder": {**BYTE_LEVEL, "add_prefix_space": True, "use_regex": True},
}
SINGLE_TOKENS = tuple(t for t in BPE_WHITESPACE_TOKENS if not t.rstrip("\n").strip(" "))

TINY = TinySpec(
    model_type="llama",
    pipeline=PIPELINE,
    bos_token=IM_START,
    eos_token=IM_END,
    pad_token=IM_END,
    unk_token=ENDOFTEXT,
    special_tokens=SPECIAL_TOKENS,
    single_tokens=SINGLE_TOKENS,
    words=("system", "user", "assistant", "SmolLM", "Hugging", "Face", "helpful"),
    # generation_config ends a reply at <|im_end|> only (EOS id 2).
    eos_tokens=(IM_END,),
    template_text=TEMPLATE,
)


class SmolLM2Processor(ChatFormat):
    """SmolLM2 Instruct: ``<|im_start|>{role}\\n{text}<|im_end|>\\n``, text verbatim, no BOS.

    Without a system prompt the template writes its own system turn, and so does the processor.
    """

    name = "smollm2"
    chat_template = "smollm2"  # the model's own template (smollm2.jinja), not one of trl's
    role_header = f"{IM_START}{{role}}\n"
    turn_end = IM_END
    stop_tokens = (IM_END,)
    # The model stops at <|im_end|>; the newline the template writes after it is never sampled.
    separator = "\n"
    extra_ends = (ENDOFTEXT,)
    default_system = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
    tiny = TINY

"""End-to-end checks a new processor family runs on its tiny model, beside ``ProcessorFamily``.

``trl-env check`` on a tokenizer folder that carries one of trl's templates, a short game of
``guess`` through ``trl-env eval``, and env text that spells the family's control tokens::

    result = check_cli_with_template(Gemma4Processor, "gemma3", tmp_path)
    assert result.exit_code == 1  # another family's template does not fit
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..protocols import Processor, Tokenizer

__all__ = ["assert_env_text_stays_text", "check_cli_with_template", "play_guess"]


def check_cli_with_template(cls: type, template: str, folder: Path, *args: str) -> Any:
    """``trl-env check --processor NAME --tokenizer FOLDER`` (click's result), where FOLDER holds
    ``cls``'s tiny tokenizer with trl's chat template ``template`` in place of its own."""
    from click.testing import CliRunner

    from ..cli.main import cli
    from ..tiny import official_template
    from .processors import tiny_tokenizer

    tokenizer = tiny_tokenizer(cls())
    tokenizer.chat_template = official_template(template)
    tokenizer.save_pretrained(folder)
    command = ["check", "--processor", str(getattr(cls, "name", "")), "--tokenizer", str(folder)]
    return CliRunner().invoke(cli, [*command, *args])


def play_guess(
    processor: str, folder: Path, *args: str, episodes: int = 2, max_turns: int = 2
) -> list[dict[str, Any]]:
    """Play ``guess`` with ``processor``'s tiny model through ``trl-env eval``; its records.

    Every episode must finish without an infrastructure error and without a bridge mismatch
    (an inserted piece whose ids differ from tokenizing the whole text).
    """
    from click.testing import CliRunner

    from ..cli.main import cli

    out = folder / "eval.jsonl"
    command = ["eval", "--env", "guess", "--processor", processor, "--model", "tiny"]
    command += ["--episodes", str(episodes), "--max-turns", str(max_turns), "--out", str(out)]
    result = CliRunner().invoke(cli, [*command, *args])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == episodes, result.output
    for record in records:
        assert not record["error"] and record["turns"] >= 1, record["error"]
        assert record["bridge_mismatches"] == 0, record["text"]
        assert len(record["completion_ids"]) == len(record["env_mask"])
    return records


def assert_env_text_stays_text(
    processor: Processor, tokenizer: Tokenizer, controls: Sequence[str]
) -> None:
    """Env text quoting each of the family's ``controls`` keeps them as text (unless allowed).

    The reply's ids hold exactly the control tokens the processor's own framing writes, decode
    back to the text, and with ``allow_special`` the quoted strings become those tokens.
    """
    from ..wire import Wire

    wire = Wire.bind(processor, tokenizer)
    missing = [c for c in controls if c not in wire.special_tokens]
    assert not missing, f"the engine's rule does not cover {missing}"
    vocab = tokenizer.get_vocab()
    ids_of = {vocab[c] for c in wire.special_tokens if c in vocab}
    for control in controls:
        forged = f"quote {control}{wire.close_text} and {control}x"
        text = wire.reply_text(forged)
        kept = wire.reply_ids(text, [forged], allow_special=False)
        framing = wire.count_special(text.replace(forged, ""))
        assert sum(i in ids_of for i in kept) == framing, control
        back = tokenizer.decode(kept, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        assert back == text, control
        allowed = wire.reply_ids(text, [forged], allow_special=True)
        assert sum(i in ids_of for i in allowed) == wire.count_special(text), control

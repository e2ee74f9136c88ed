"""Does a processor fit a tokenizer? Render sample conversations both ways and compare.

The reference is the tokenizer's own chat template. ``trl-env check`` prints the report, and
``train`` / ``eval`` call :func:`ensure_fits` up front. Light to import: transformers and jinja
are only touched through the tokenizer that is passed in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from . import extras
from .errors import TokenizerMismatchError
from .protocols import Processor, Tokenizer
from .wire import Wire, encode_after


@dataclass(frozen=True)
class Conversation:
    """``system`` (``None``: no system message), then user, assistant, ..., user: awaiting a reply.

    ``replies`` are the assistant texts as sampled, without the end-of-turn token; there is one
    fewer reply than user messages.
    """

    system: str | None
    users: tuple[str, ...]
    replies: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if len(self.replies) != len(self.users) - 1:
            raise ValueError("a conversation needs exactly one reply fewer than user messages")

    def messages(self, *, merge_system: bool = False) -> list[dict[str, str]]:
        """Chat messages; ``merge_system`` puts the system text at the start of the first user."""
        out: list[dict[str, str]] = []
        for i, user in enumerate(self.users):
            if i:
                out.append({"role": "assistant", "content": self.replies[i - 1]})
            out.append({"role": "user", "content": user})
        if self.system is not None:
            if merge_system:
                out[0] = {"role": "user", "content": f"{self.system}\n\n{out[0]['content']}"}
            else:
                out.insert(0, {"role": "system", "content": self.system})
        return out


@dataclass(frozen=True)
class Segment:
    """A piece of an episode's text: ``inserted`` by the engine, or sampled by the model."""

    text: str
    inserted: bool


def segments(
    processor: Processor, conversation: Conversation, tokenizer: Tokenizer | None = None
) -> list[Segment]:
    """The pieces the rollout engine concatenates for ``conversation``, in order."""
    end = extras.stop_tokens(processor, tokenizer)[0]
    separator = extras.turn_separator(processor)
    users = conversation.users
    out = [Segment(extras.first_prompt(processor, conversation.system or "", users[0]), True)]
    # A processor may declare ``sampled_reply(content)``: what its model samples for an
    # assistant message the template renders with ``content`` (gpt-oss: a channel header first).
    sampled = getattr(processor, "sampled_reply", None)
    for reply, user in zip(conversation.replies, users[1:], strict=True):
        out.append(Segment((sampled(reply) if callable(sampled) else reply) + end, False))
        out.append(Segment(separator + processor.append_user_input(user), True))
    return out


def processor_text(
    processor: Processor, conversation: Conversation, tokenizer: Tokenizer | None = None
) -> str:
    """The engine's text for ``conversation``, as it is compared with a chat template.

    A processor may declare ``history_view(text)``: the same text as its official template
    renders it, its documented differences undone (gpt-oss: earlier analysis dropped,
    ``<|return|>`` written ``<|end|>``, the developer message as the HF template ends it); first
    prompts go through it too; segments and their ids never do.
    """
    text = "".join(s.text for s in segments(processor, conversation, tokenizer))
    view = getattr(processor, "history_view", None)
    return view(text) if callable(view) else text


def template_text(
    tokenizer: Tokenizer, conversation: Conversation, *, template: str | None = None, **kwargs: Any
) -> str:
    """``apply_chat_template`` with the generation prompt.

    A template that refuses a system role (Gemma 2) gets the system text merged into the first
    user turn, the way Gemma 3's template does it.
    """

    def render(merge: bool) -> str:
        return tokenizer.apply_chat_template(
            conversation.messages(merge_system=merge),
            tokenize=False,
            add_generation_prompt=True,
            chat_template=template,
            **kwargs,
        )

    try:
        return render(False)
    except Exception as exc:
        if conversation.system is None or "system" not in str(exc).lower():
            raise
        return render(True)


def template_kwargs(processor: Processor) -> dict[str, Any]:
    kwargs = getattr(processor, "template_kwargs", None)
    return dict(kwargs) if isinstance(kwargs, dict) else {}


def multi_turn_template(processor: Processor, tokenizer: Tokenizer) -> tuple[str | None, str]:
    """The template multi-turn text is compared with, and its name.

    A processor may declare ``multi_turn_template``: a trl template its concatenated turns equal by
    design (Qwen 3 keeps earlier reasoning: ``qwen3_training``). It is used only when the
    tokenizer carries the processor's official template unchanged, as trl itself swaps them.
    """
    name = getattr(processor, "multi_turn_template", None)
    official = getattr(processor, "chat_template", None)
    if isinstance(name, str) and isinstance(official, str):
        from .tiny import official_template

        try:
            if tokenizer.chat_template == official_template(official):
                return official_template(name), f"trl's {name} template"
        except Exception:
            pass
    return None, "the tokenizer's chat template"


def first_difference(
    ours: str, theirs: str, *, labels: tuple[str, str] = ("processor", "template")
) -> str | None:
    """Where two texts first differ, with a little context, or ``None`` when equal."""
    if ours == theirs:
        return None
    i = next((k for k, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b), None)
    if i is None:
        i = min(len(ours), len(theirs))
    line = theirs.count("\n", 0, i) + 1
    start = max(0, i - 30)

    def window(text: str) -> str:
        return repr(
            ("…" if start else "") + text[start : i + 30] + ("…" if len(text) > i + 30 else "")
        )

    return (
        f"at character {i} (line {line}): {labels[0]} has {window(ours)}, "
        f"{labels[1]} has {window(theirs)}"
    )


def encode(tokenizer: Tokenizer, text: str) -> list[int]:
    """Ids of ``text`` as the engine tokenizes every segment: no special tokens added."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def segment_mismatch(tokenizer: Tokenizer, pieces: Sequence[Segment]) -> str | None:
    """``None`` when tokenizing piece by piece equals tokenizing the whole text, else where not."""
    whole = encode(tokenizer, "".join(p.text for p in pieces))
    joined: list[int] = []
    for k, piece in enumerate(pieces):
        # Inserted text after a sampled turn is encoded after that turn's end, as the engine does.
        after = pieces[k - 1].text if k and piece.inserted else ""
        joined += (
            encode_after(tokenizer, after, piece.text) if after else encode(tokenizer, piece.text)
        )
        if joined != whole[: len(joined)]:
            kind = "inserted" if piece.inserted else "sampled"
            head = piece.text[:40]
            return f"segment {k} ({kind}, {head!r}) tokenizes differently inside the whole text"
    return None if joined == whole else "the whole text has extra tokens after the last segment"


# -- the report -------------------------------------------------------------------------------

SAMPLES = (
    Conversation("You are a careful agent.", ("Where is the box?",)),
    Conversation(None, ("Guess a number between 1 and 100.",)),
    Conversation(
        "Rules:\n- reply with one move\n- be brief",
        ("Board:\n#####\n#@ $#\n#####\n\nYour move?", "You moved right. 12 steps left.", "Done?"),
        ("right", "Pushing the box: ünïcode ok 🙂"),
    ),
    Conversation(None, ("Hello there", "Wrong: 2048 is too high."), ("I guess 2048.",)),
)
ROUND_TRIP_SAMPLES = (
    "The answer is 42.",
    "line one\n\nline two\n",
    "  indented code:\n    return x * 2",
    "naïve café, 中文, emoji 🙂",
    "1234567 + 89 = 1234656",
    '{"name": "add", "arguments": {"a": 1}}',
)


@dataclass(frozen=True)
class CheckItem:
    """One comparison; an item that is not ``required`` informs and never fails the check."""

    name: str
    ok: bool
    detail: str
    required: bool = True
    short: str = ""  # the reason in the report's one-sentence message; default: detail


@dataclass
class CheckReport:
    processor: str
    tokenizer: str
    items: list[CheckItem] = field(default_factory=list)
    first_difference: str | None = None
    # The processor option (``key=value``) with which the texts equal the template, when the
    # processor as asked for does not fit and one of its option_variants does.
    fits_with: str | None = None
    stop_tokens: dict[str, int | None] = field(default_factory=dict)
    eos_tokens: dict[str, int] = field(default_factory=dict)  # the model's end-of-sequence ids

    @property
    def ok(self) -> bool:
        return all(item.ok for item in self.items if item.required)

    @property
    def message(self) -> str:
        """One sentence saying what does not fit, or that everything does."""
        if self.ok:
            return f"Processor {self.processor} fits tokenizer {self.tokenizer}."
        reasons = [
            i.short or f"{i.name}: {i.detail}" for i in self.items if i.required and not i.ok
        ]
        hint = (
            f"; it fits with the processor option {self.fits_with} "
            f"(--processor-arg {self.fits_with})"
            if self.fits_with
            else ""
        )
        return (
            f"Processor {self.processor} does not fit tokenizer {self.tokenizer}: "
            f"{'; '.join(dict.fromkeys(reasons))}{hint}."
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "processor": self.processor,
            "tokenizer": self.tokenizer,
            "message": self.message,
            "items": [asdict(i) for i in self.items],
            "first_difference": self.first_difference,
            "fits_with": self.fits_with,
            "stop_tokens": dict(self.stop_tokens),
            "eos_tokens": dict(self.eos_tokens),
        }


def check_processor(
    processor: Processor,
    tokenizer: Tokenizer,
    *,
    name: str | None = None,
    tokenizer_name: str | None = None,
    conversations: Sequence[Conversation] = SAMPLES,
    eos_ids: Sequence[int] = (),
) -> CheckReport:
    """Compare ``processor`` with ``tokenizer``'s chat template on sample conversations.

    ``eos_ids`` are the model's own end-of-sequence ids (its ``generation_config``); a turn ends
    at those too, and the report lists them beside the processor's stop tokens.
    """
    report = CheckReport(
        processor=name or getattr(processor, "name", None) or type(processor).__name__,
        tokenizer=tokenizer_name
        or str(getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__),
    )
    report.items.append(_check_stop_tokens(processor, tokenizer, report, eos_ids))
    if not getattr(tokenizer, "chat_template", None):
        report.items.append(
            CheckItem(
                "chat template",
                True,
                "the tokenizer has no chat template: nothing to compare",
                False,
            )
        )
    else:
        texts = _check_texts(processor, tokenizer, conversations, report)
        report.items += texts
        if not all(item.ok for item in texts):
            report.fits_with = _fitting_variant(processor, tokenizer, conversations)
    report.items.append(_check_segments(processor, tokenizer, conversations))
    report.items.append(_check_env_special_tokens(processor, tokenizer))
    report.items.append(_check_round_trip(tokenizer))
    return report


def ensure_fits(processor: Processor, tokenizer: Tokenizer, **kwargs: Any) -> CheckReport:
    """:func:`check_processor`, raising :class:`TokenizerMismatchError` with its message."""
    report = check_processor(processor, tokenizer, **kwargs)
    if not report.ok:
        raise TokenizerMismatchError(report.message, report.fits_with)
    return report


def _check_stop_tokens(
    processor: Processor, tokenizer: Tokenizer, report: CheckReport, eos_ids: Sequence[int]
) -> CheckItem:
    try:
        stops = extras.stop_tokens(processor, tokenizer)
    except ValueError as exc:
        return CheckItem("stop tokens", False, str(exc))
    vocab = tokenizer.get_vocab()
    report.stop_tokens = {t: vocab.get(t) for t in stops}
    missing = [t for t, i in report.stop_tokens.items() if i is None]
    if missing:
        listed = ", ".join(missing)
        return CheckItem(
            "stop tokens",
            False,
            f"not in the vocabulary: {listed}",
            short=f"stop token {listed} is not in its vocabulary",
        )
    wire = Wire.bind(processor, tokenizer, eos_ids)
    names = {i: t for t, i in vocab.items()}
    report.eos_tokens = {names.get(i, str(i)): i for i in wire.eos_ids}
    # The engine stops on ids and closes turns with turn_close's ids: both must be one token.
    split = [
        t for t, i in report.stop_tokens.items() if i is not None and encode(tokenizer, t) != [i]
    ]
    if split:
        return CheckItem("stop tokens", False, f"not read as one token in text: {', '.join(split)}")
    close = extras.turn_close(processor, tokenizer)
    if not close.endswith(stops):
        return CheckItem("stop tokens", False, f"turn_close {close!r} does not end the turn")
    shown = ", ".join(f"{t}={i}" for t, i in report.stop_tokens.items())
    eos = ", ".join(f"{t}={i}" for t, i in report.eos_tokens.items()) or "none"
    return CheckItem("stop tokens", True, f"{shown}; the model's end-of-sequence ids: {eos}")


def _check_texts(
    processor: Processor,
    tokenizer: Tokenizer,
    conversations: Sequence[Conversation],
    report: CheckReport,
) -> list[CheckItem]:
    kwargs = template_kwargs(processor)
    multi, multi_name = multi_turn_template(processor, tokenizer)
    items = []
    for label, group, template, source in (
        (
            "first prompt",
            [c for c in conversations if not c.replies],
            None,
            "the tokenizer's chat template",
        ),
        ("conversation text", [c for c in conversations if c.replies], multi, multi_name),
    ):
        if not group:
            continue
        problem = None
        for conv in group:
            try:
                ours = processor_text(processor, conv, tokenizer)
                theirs = template_text(tokenizer, conv, template=template, **kwargs)
            except Exception as exc:
                problem = f"rendering failed: {type(exc).__name__}: {exc}"
                break
            diff = first_difference(ours, theirs)
            if diff is not None:
                report.first_difference = report.first_difference or diff
                problem = f"differs from {source} {diff}"
                break
        ok_detail = f"equal to {source} on {len(group)} sample(s)"
        # One reason for both text items in the message: the first difference says enough.
        short = f"the text differs from {source} {report.first_difference}"
        items.append(CheckItem(label, problem is None, problem or ok_detail, short=short))
    return items


def _fitting_variant(
    processor: Processor, tokenizer: Tokenizer, conversations: Sequence[Conversation]
) -> str | None:
    """The first of the processor's option variants whose texts equal the template's."""
    for option, variant in extras.option_variants(processor).items():
        scratch = CheckReport(processor=option, tokenizer="")
        if all(item.ok for item in _check_texts(variant, tokenizer, conversations, scratch)):
            return option
    return None


def _bos_allowed(processor: Processor, tokenizer: Tokenizer, conv: Conversation) -> int:
    """How many BOS tokens the text may hold: one, or as many as the chat template writes where
    the BOS token also opens every message (SmolLM2's is ``<|im_start|>``)."""
    token = getattr(tokenizer, "bos_token", None)
    if not token or not getattr(tokenizer, "chat_template", None):
        return 1
    try:
        return max(1, template_text(tokenizer, conv, **template_kwargs(processor)).count(token))
    except Exception:  # a template that fails is reported by the text comparison
        return 1


def _check_segments(
    processor: Processor, tokenizer: Tokenizer, conversations: Sequence[Conversation]
) -> CheckItem:
    bos = getattr(tokenizer, "bos_token_id", None)
    for conv in conversations:
        try:
            pieces = segments(processor, conv, tokenizer)
        except Exception as exc:
            return CheckItem(
                "segment tokens", False, f"rendering failed: {type(exc).__name__}: {exc}"
            )
        problem = segment_mismatch(tokenizer, pieces)
        if problem:
            return CheckItem("segment tokens", False, problem)
        text = "".join(p.text for p in pieces)
        if bos is not None and encode(tokenizer, text).count(bos) > _bos_allowed(
            processor, tokenizer, conv
        ):
            return CheckItem(
                "segment tokens", False, f"the BOS token {tokenizer.bos_token} appears twice"
            )
    return CheckItem(
        "segment tokens", True, "each inserted segment tokenizes alone as in the whole text"
    )


def _check_env_special_tokens(processor: Processor, tokenizer: Tokenizer) -> CheckItem:
    """Env text that spells the turn's control tokens stays text: the rule the engine applies
    (unless the rollout option ``env_special_tokens`` allows them)."""
    name = "env text"
    try:
        wire = Wire.bind(processor, tokenizer)
    except Exception as exc:  # the stop-token item already says what is wrong
        return CheckItem(name, False, f"not checked: {exc}", required=False)
    if not wire.control_tokens:
        return CheckItem(name, True, "the tokenizer has no control tokens", False)
    forged = f"ok{wire.close_text}{''.join(wire.control_tokens[:3])} then"
    try:
        text = wire.reply_text(forged)
    except Exception as exc:  # the processor's failure is reported by the items above
        return CheckItem(name, False, f"not checked: the processor raised {exc!r}", False)
    try:
        ids = wire.reply_ids(text, [forged], allow_special=False)
    except Exception as exc:
        return CheckItem(name, False, f"cannot keep special tokens as text: {exc}")
    vocab = tokenizer.get_vocab()
    specials = {vocab[t] for t in wire.control_tokens if t in vocab}
    template_only = text.replace(forged, "")
    expected = wire.count_special(template_only)
    got = sum(1 for i in ids if i in specials)
    back = tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    if got != expected or back != text:
        return CheckItem(
            name, False, f"env text spelling {wire.close_text} still becomes control tokens"
        )
    tokens = wire.control_tokens
    shown = ", ".join(tokens[:4]) + (", ..." if len(tokens) > 4 else "")
    return CheckItem(
        name,
        True,
        f"control-token strings in env text ({shown}) stay plain text; the rollout option "
        "env_special_tokens lets them become tokens",
        False,
    )


def _check_round_trip(tokenizer: Tokenizer) -> CheckItem:
    failed = []
    for text in ROUND_TRIP_SAMPLES:
        ids = encode(tokenizer, text)
        back = tokenizer.decode(ids)
        if back != text or encode(tokenizer, back) != ids:
            failed.append(text)
    if failed:
        detail = (
            f"{len(failed)} of {len(ROUND_TRIP_SAMPLES)} sample strings do not, e.g. {failed[0]!r}"
        )
        return CheckItem("re-encode", False, detail, required=False)
    return CheckItem(
        "re-encode",
        True,
        f"all {len(ROUND_TRIP_SAMPLES)} sample strings re-encode to themselves",
        False,
    )

"""Defaults for the optional extras of :class:`~trl_env.protocols.Env` and ``Processor``."""

from __future__ import annotations

from typing import Any

from .protocols import Env, Processor, Seed, Tokenizer

DEFAULT_SYSTEM_PROMPT = (
    "You are an agent in a text environment. Read each observation and reply with your next action."
)
SPLITS = ("train", "eval")


def system_prompt(env: Env) -> str:
    prompt = getattr(env, "system_prompt", None)
    if callable(prompt):
        prompt = prompt()
    return prompt if isinstance(prompt, str) and prompt else DEFAULT_SYSTEM_PROMPT


def seeds(env: Env, split: str, count: int) -> list[Seed]:
    """``count`` seeds of ``split``; train and eval seeds never overlap."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, not {split!r}")
    generator = getattr(env, "seeds", None)
    if callable(generator):
        out = [str(s) for s in generator(split, count)]
        if len(out) != count:
            raise ValueError(
                f"{type(env).__name__}.seeds({split!r}, {count}) returned {len(out)} seeds"
            )
        return out
    return [f"{split}-{i}" for i in range(count)]


def reset_timeout(env: Env) -> float | None:
    """Seconds ``reset`` may take when that is more than a step (waiting for a server slot)."""
    value = getattr(env, "reset_timeout", None)
    return float(value) if isinstance(value, int | float) and value > 0 else None


def waited_seconds(env: Env) -> float:
    """Seconds the last ``reset`` spent waiting for a resource (``slot_wait_seconds``): not env
    time."""
    value = getattr(env, "slot_wait_seconds", 0.0)
    return float(value) if isinstance(value, int | float) and value > 0 else 0.0


def max_turns(env: Env, default: int) -> int:
    value = getattr(env, "max_turns", None)
    return value if isinstance(value, int) and value > 0 else default


def success(value: object) -> bool | None:
    """An env's ``success`` extra as read (attribute or method result); None: not given."""
    if isinstance(value, bool):
        return value
    item = getattr(value, "item", None)  # numpy's and torch's booleans hold a Python bool
    plain = item() if callable(item) else None
    return plain if isinstance(plain, bool) else None


def turn_reward(env: Env) -> Any:
    """The env's ``turn_reward`` extra (attribute or method result), read after each step when
    training with credit per turn: the part of the episode's reward that the last step earned.
    None when the env has none; then the change of ``reward`` over the step is used."""
    value = getattr(env, "turn_reward", None)
    return value() if callable(value) else value


def demonstrate(env: Env, seed: Seed) -> list[str] | None:
    """The actions of a good episode of ``seed`` from the env's ``demonstrate`` extra (what
    ``trl-env sft`` trains on); None when the env gives none. Raises ValueError when it returns
    something other than a list of strings."""
    method = getattr(env, "demonstrate", None)
    if not callable(method):
        return None
    return demonstrated(method(seed), type(env).__name__, seed)


def demonstrates(factory: object) -> bool | None:
    """Whether the envs ``factory`` makes have the ``demonstrate`` extra, read off the class
    without making one; None when a function makes them (only an env can say)."""
    if not isinstance(factory, type):
        return None
    return callable(getattr(factory, "demonstrate", None))


def demonstrated(actions: Any, who: str, seed: Seed) -> list[str] | None:
    """``actions``, what ``who.demonstrate(seed)`` returned, as a list of actions; ValueError
    for anything else (None stays None: no demonstration)."""
    if actions is None:  # an env in a worker process reads as None when it has no such method
        return None
    if isinstance(actions, str | bytes) or not isinstance(actions, list | tuple):
        raise ValueError(
            f"{who}.demonstrate({seed!r}) returned {type(actions).__name__}, not a list of actions"
        )
    bad = [a for a in actions if not isinstance(a, str)]
    if bad:
        raise ValueError(
            f"{who}.demonstrate({seed!r}) holds {type(bad[0]).__name__} {bad[0]!r}, "
            "not a string action"
        )
    return [str(a) for a in actions]


def close(env: Env) -> None:
    closer = getattr(env, "close", None)
    if callable(closer):
        closer()


def stop_tokens(processor: Processor, tokenizer: Tokenizer | None = None) -> tuple[str, ...]:
    tokens = getattr(processor, "stop_tokens", None)
    if tokens:
        return tuple(tokens)
    eos = getattr(tokenizer, "eos_token", None)
    if not eos:
        raise ValueError(
            f"{type(processor).__name__} declares no stop_tokens and the tokenizer has no eos_token"
        )
    return (eos,)


def turn_close(processor: Processor, tokenizer: Tokenizer | None = None) -> str:
    close_text = getattr(processor, "turn_close", None)
    return close_text if isinstance(close_text, str) else stop_tokens(processor, tokenizer)[0]


def turn_separator(processor: Processor) -> str:
    sep = getattr(processor, "turn_separator", "")
    return sep if isinstance(sep, str) else ""


def first_prompt(processor: Processor, system: str, user: str) -> str:
    """Text of the first prompt: system turn, first user turn and the generation header."""
    init = getattr(processor, "init_conversation", None)
    if callable(init):
        return init(system, user)
    return processor.init_system_input(system) + processor.append_user_input(user)


def option_variants(processor: Processor) -> dict[str, Processor]:
    """The processor's other settings worth trying on a template it does not fit, by option
    text (``"empty_thought=true"``); none when it declares none or its declaration fails."""
    variants = getattr(processor, "option_variants", None)
    try:
        found = variants() if callable(variants) else {}
    except Exception:  # a hint, never a reason for the check itself to fail
        return {}
    return {k: v for k, v in found.items() if isinstance(k, str)} if isinstance(found, dict) else {}

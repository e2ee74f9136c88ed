"""The two contracts of trl-env, and the optional extras an environment or processor may offer.

Code written against the seed's three-method ``Processor`` and two-method ``Env`` keeps working:
every extra below is looked up with a documented default (see :mod:`trl_env.extras`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

Action = str
Delta = str
Seed = str
Language = str


@runtime_checkable
class Env(Protocol):
    """A text environment: ``reset`` and ``step`` return the text the agent sees next.

    Optional extras (all looked up with ``getattr``, none required):

    - ``system_prompt: str`` - rules and action format; default :data:`DEFAULT_SYSTEM_PROMPT`.
    - ``seeds(split: str, count: int) -> list[Seed]`` - deterministic seeds for ``"train"`` and
      ``"eval"``, disjoint; default ``"train-0", "train-1", ...`` and ``"eval-0", ...``.
    - ``max_turns: int`` - the env's own step limit, used when the caller gives none.
    - ``success: bool`` (or a method returning one) - whether the episode succeeded (solved,
      won), read once after it ends like ``reward``; per-env success rates come from it.
    - ``demonstrate(seed) -> list[str]`` - the actions of a good episode of ``seed``: replayed
      through ``reset``/``step`` they win. ``trl-env sft`` trains on them.
    - ``close() -> None`` - release resources; called once when an episode is over.
    - ``reset_timeout: float`` - seconds ``reset`` may take when that is more than a step's
      timeout (an env waiting for a free server slot).
    - ``slot_wait_seconds: float`` - how long the last ``reset`` waited for such a resource;
      not counted as env time.
    """

    reward: float
    alive: bool

    def reset(self, seed: Seed) -> Delta: ...

    def step(self, action: Action) -> Delta: ...


@runtime_checkable
class Processor(Protocol):
    """One chat wire format: renders environment text as tokens-ready text, parses model output.

    Optional extras a processor declares (defaults in :mod:`trl_env.extras`):

    - ``stop_tokens: tuple[str, ...]`` - end-of-turn tokens generation stops on
      (for Gemma ``<end_of_turn>``, not ``eos_token``); default: the tokenizer's ``eos_token``.
    - ``turn_close: str`` - text that closes a turn cut at the token limit; default
      ``stop_tokens[0]``.
    - ``turn_separator: str`` - text between a closed assistant turn and the next
      ``append_user_input`` (``"\\n"`` for ChatML and Gemma, ``""`` for Llama 3); default ``""``.
    - ``init_conversation(system, user) -> str`` - the first prompt when it is not simply
      ``init_system_input(system) + append_user_input(user)`` (Gemma puts the system text inside
      the first user turn).
    - ``chat_template: str`` - name of the official template in ``trl/chat_templates`` it matches.
    - ``multi_turn_template: str`` - the trl template its multi-turn text equals when that is not
      ``chat_template`` (Qwen3 keeps earlier reasoning in context, as ``qwen3_training`` does).
    - ``template_kwargs: dict`` - extra arguments for ``apply_chat_template`` in checks
      (``enable_thinking``, ``date_string``).
    - ``sampled_reply(content) -> str`` - what the model samples (before its stop token) for an
      assistant message the template renders with ``content``; default ``content`` (gpt-oss
      writes its final channel's header first).
    - ``history_view(text) -> str`` - the engine's text (first prompt or many turns) as the
      official template renders it, the documented differences undone; checks compare through it
      (gpt-oss: earlier analysis dropped, ``<|return|>`` written ``<|end|>``, the developer
      message ended as the HF template ends it).
    - ``option_variants() -> dict[str, Processor]`` - the same processor with other options
      (``"empty_thought=true"``: that processor) that fit other revisions of the family's template;
      a check that fails tries each and names the one that fits.
    - ``tiny_spec`` - a :class:`trl_env.tiny.TinySpec` to build the family's offline tiny model.

    An empty system prompt means "no system message"; the processor renders what the family's
    template renders then (Qwen2.5 inserts its default system turn).
    """

    def init_system_input(self, prompt: Language) -> str: ...

    def append_user_input(self, prompt: Language) -> str: ...

    def parse_agent_output(self, completion: Language) -> tuple[str, str]: ...


class Tokenizer(Protocol):
    """The part of a ``transformers`` tokenizer the core uses (a fast tokenizer has it all)."""

    eos_token: Any
    eos_token_id: Any
    bos_token: Any
    bos_token_id: Any
    pad_token_id: Any
    chat_template: Any

    def __call__(self, text: Any, **kwargs: Any) -> Any: ...

    def decode(self, ids: Sequence[int], **kwargs: Any) -> str: ...

    def get_vocab(self) -> dict[str, int]: ...

    def convert_tokens_to_ids(self, tokens: Any) -> Any: ...

    def convert_ids_to_tokens(self, ids: Any) -> Any: ...

    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any: ...


ENV_METHODS = ("reset", "step")  # what makes an env; ``reward`` and ``alive`` are read later


def missing_members(obj: object) -> list[str]:
    """The methods of :class:`Env` that ``obj`` lacks (``reset``, ``step``); empty for an env.

    The one check of "is this an env?" for every way an env is made (a factory, a registered
    name, in this process or a worker). ``reward`` and ``alive`` are read when the episode
    needs them, and a failure to read them is reported then.
    """
    return [m for m in ENV_METHODS if not callable(getattr(obj, m, None))]


def not_an_env(obj: object, who: str) -> str:
    """The sentence for ``who`` having made ``obj`` when it is not an env; "" for an env."""
    if obj is None:
        return f"{who} returned None, not an env"
    missing = missing_members(obj)
    if not missing:
        return ""
    absent = [m for m in missing if not hasattr(obj, m)]
    problems = [f"it lacks {', '.join(absent)}"] if absent else []
    if len(absent) < len(missing):
        problems.append(f"{', '.join(m for m in missing if m not in absent)} must be methods")
    return (
        f"{who} returned a {type(obj).__name__}, which is not an env: {'; '.join(problems)} "
        "(an env needs reset(seed) and step(action))"
    )

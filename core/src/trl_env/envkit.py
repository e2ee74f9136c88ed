"""The env kit: a base class that gives an environment its options, splits and seeding.

Optional for authors: any object with ``reset``, ``step``, ``reward`` and ``alive`` is an env
(:class:`trl_env.protocols.Env`). The kit only saves writing the same parts five times::

    from trl_env.envkit import EnvKit, Option

    class GuessEnv(EnvKit):
        env_name = "guess"
        high = Option(100, "largest number the secret can be", min=1)
        max_turns = Option(10, "guesses per episode", min=1)

        def reset(self, seed: str) -> str:
            self.secret = 1 + self.seed_int(seed) % self.high
            ...

An option is declared once, as a class attribute: its type comes from the default, and the
class's keyword arguments, their validation (one sentence naming the option, the value and what
is accepted), ``trl-env list --env NAME`` and ``--help`` all read that declaration through
:func:`option_specs`. Deliberately light: standard library only, no torch, transformers or trl.
"""

from __future__ import annotations

import builtins
import difflib
import hashlib
import inspect
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar, overload

from .errors import TrlEnvError
from .extras import DEFAULT_SYSTEM_PROMPT, SPLITS

T = TypeVar("T")

# The scalar types an option may have: what `--env-arg key=value` (a YAML scalar) and config
# files produce, so every option can be set from the command line.
_TYPES: dict[type, str] = {bool: "bool", int: "int", float: "float", str: "str"}
_NOUNS = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
# A refused value lists the accepted ones up to this many; past it, `trl-env list --env` does
LISTED_CHOICES = 12


class OptionError(TrlEnvError, ValueError):
    """An env option has a value the env does not accept (one sentence, shown by the CLI)."""

    exit_code = 2  # a value the user gave: a usage error


class OptionTypeError(OptionError, TypeError):
    """An env option has a value of the wrong type (``"7"`` for an integer, ``1`` for a bool)."""


@dataclass(frozen=True)
class OptionSpec:
    """One option as the CLI shows it: ``trl-env list --env NAME`` and ``--help``."""

    name: str
    type: str  # "int", "float", "bool", "str"; "int | None" when None is accepted too
    default: Any
    help: str
    choices: tuple[Any, ...] | None = None
    accepted: str = ""  # in words: "an integer from 1 to 20"


def _number_text(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


class Option(Generic[T]):
    """A typed env option with a default and a help line; see the module docstring.

    ``type`` is taken from ``default`` (give it when the default is None, which then means
    "not set"). ``choices`` limits the values; ``min``/``max`` are inclusive bounds and
    ``above`` an exclusive lower bound, for numbers.
    """

    def __init__(
        self,
        default: T,
        help: str,
        *,
        type: builtins.type | None = None,
        choices: Sequence[T] | None = None,
        min: float | None = None,
        max: float | None = None,
        above: float | None = None,
    ) -> None:
        kind = type if type is not None else builtins.type(default)
        if kind not in _TYPES:
            raise TypeError(f"an option's type must be bool, int, float or str, not {kind!r}")
        self.kind: builtins.type = kind
        self.default = default
        self.help = help
        self.choices = tuple(choices) if choices is not None else None
        self.min, self.max, self.above = min, max, above
        self.name = ""
        self.owner = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        self.owner = getattr(owner, "env_name", "") or owner.__name__

    @overload
    def __get__(self, obj: None, objtype: type | None = None) -> Option[T]: ...

    @overload
    def __get__(self, obj: object, objtype: type | None = None) -> T: ...

    def __get__(self, obj: object | None, objtype: type | None = None) -> Any:
        if obj is None:
            return self
        # Values live in the instance's __dict__ (set by EnvKit.__init__), which wins over a
        # non-data descriptor; reaching here means the instance was built without EnvKit.
        return self.default

    def accepted(self) -> str:
        """What the option accepts, in words: "an integer from 1 to 20", "one of easy, hard"."""
        if self.choices is not None:
            text = "one of " + ", ".join(str(c) for c in self.choices)
        else:
            text = _NOUNS[self.kind]
            if self.min is not None and self.max is not None:
                text += f" from {_number_text(self.min)} to {_number_text(self.max)}"
            elif self.min is not None:
                text += f" of at least {_number_text(self.min)}"
            elif self.above is not None:
                text += f" above {_number_text(self.above)}"
            elif self.max is not None:
                text += f" of at most {_number_text(self.max)}"
        return text + (" (or none)" if self.default is None else "")

    def refuse(self, value: Any, error: type[OptionError] = OptionError) -> OptionError:
        if self.choices is not None and len(self.choices) > LISTED_CHOICES:
            # the whole list runs to a screenful: the close match, and where the list is
            return error(
                f"Option {self.name} of {self.owner} takes no {value!r}{self._closest(value)}; "
                f"its {len(self.choices)} values: trl-env list --env {self.owner}."
            )
        return error(
            f"Option {self.name} of {self.owner} must be {self.accepted()}, not "
            f"{value!r}{self._closest(value)}."
        )

    def _closest(self, value: Any) -> str:
        """`` (did you mean X?)`` for the choice closest to ``value``, ignoring case; or ""."""
        if self.choices is None:
            return ""
        given = str(value).lower()

        def score(choice: Any) -> float:
            return difflib.SequenceMatcher(None, given, str(choice).lower()).ratio()

        best = max(self.choices, key=score)  # of equals, the first declared (-v0 before -v1)
        return f" (did you mean {best}?)" if score(best) >= 0.6 else ""

    def check(self, value: Any) -> Any:
        """``value`` if the option accepts it (an int is widened to float), else an error."""
        if value is None and self.default is None:
            return None
        if self.kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        # bool is an int in Python; an option of one type never takes the other.
        if type(value) is not self.kind:
            raise self.refuse(value, OptionTypeError)
        if self.choices is not None and value not in self.choices:
            raise self.refuse(value)
        if self.kind is not bool and isinstance(value, int | float):
            if not math.isfinite(value):
                raise self.refuse(value)
            too_low = (self.min is not None and value < self.min) or (
                self.above is not None and value <= self.above
            )
            if too_low or (self.max is not None and value > self.max):
                raise self.refuse(value)
        return value

    def spec(self) -> OptionSpec:
        name = _TYPES[self.kind] + (" | None" if self.default is None else "")
        return OptionSpec(self.name, name, self.default, self.help, self.choices, self.accepted())


def stable_int(text: str) -> int:
    """A 64-bit number from ``text`` (SHA-256): the same in every process, unlike ``hash()``."""
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big")


class EnvKit:
    """Base class for environments: options, splits, seeding and ``close`` done once.

    Subclasses declare :class:`Option` class attributes and implement ``reset`` and ``step``
    (setting ``reward`` and ``alive``). They may override ``system_prompt`` (or set
    ``prompt_template``, formatted with the options), ``seeds`` and ``close``. An ``__init__``
    of their own takes ``**options`` and calls ``super().__init__(**options)`` first; it may
    refuse a combination of values with :meth:`refuse`.
    """

    env_name: ClassVar[str] = ""  # the name users type; messages use it (default: class name)
    splits: ClassVar[tuple[str, ...]] = SPLITS
    prompt_template: ClassVar[str] = ""  # e.g. "Find the number in {max_turns} turns."
    options_declared: ClassVar[dict[str, Option[Any]]] = {}

    reward: float
    alive: bool

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        declared: dict[str, Option[Any]] = {}
        for klass in reversed(cls.__mro__):
            for name, value in vars(klass).items():
                if isinstance(value, Option):
                    declared[name] = value
                else:
                    declared.pop(name, None)  # a subclass replaced the option with a constant
        cls.options_declared = declared
        for option in declared.values():
            option.check(option.default)  # an author's bad default fails at import, not in a run
        own_init = inspect.signature(cls.__init__).parameters.values()
        kinds = [p.kind for p in own_init]
        if kinds == [inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.VAR_KEYWORD]:
            # `inspect.signature(GuessEnv)` and help() then list the real options.
            cls.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
                [
                    inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=o.default)
                    for n, o in declared.items()
                ]
            )

    def __init__(self, **options: Any) -> None:
        declared = type(self).options_declared
        for name in options:
            if name not in declared:
                raise OptionTypeError(_unknown(type(self), name))
        for name, option in declared.items():
            value = option.check(options[name]) if name in options else option.default
            self.__dict__[name] = value
        self.reward = 0.0
        self.alive = False

    # -- options ----------------------------------------------------------------------------
    @property
    def options(self) -> dict[str, Any]:
        """The option values of this env, by name (what a run config saves)."""
        return {name: self.__dict__[name] for name in type(self).options_declared}

    def refuse(self, name: str, accepted: str) -> OptionError:
        """The error for option ``name`` whose value does not fit the others; raise it."""
        label = type(self).env_name or type(self).__name__
        value = self.__dict__.get(name)
        return OptionError(f"Option {name} of {label} must be {accepted}, not {value!r}.")

    # -- optional extras of the Env protocol ---------------------------------------------------
    @property
    def system_prompt(self) -> str:
        """``prompt_template`` formatted with the options; a generic prompt without one."""
        fixed = self.__dict__.get("_system_prompt")
        if isinstance(fixed, str):
            return fixed
        template = type(self).prompt_template
        return template.format_map(self.options) if template else DEFAULT_SYSTEM_PROMPT

    @system_prompt.setter
    def system_prompt(self, text: str) -> None:
        # Envs that build their prompt once in __init__ assign it, as plain envs do.
        self.__dict__["_system_prompt"] = text

    def seeds(self, split: str, count: int) -> list[str]:
        """``"<split>-<i>"``: disjoint between splits, the same on every machine."""
        if split not in self.splits:
            raise ValueError(f"split must be one of {self.splits}, not {split!r}")
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"count must be a whole number >= 0, not {count!r}")
        return [f"{split}-{i}" for i in range(count)]

    def split_of(self, seed: str) -> str | None:
        """The split a seed of :meth:`seeds` belongs to (its prefix), or None for other seeds."""
        head = str(seed).split("-", 1)[0]
        return head if head in self.splits else None

    def close(self) -> None:
        """Release what the episode holds; nothing by default. Must be safe to call twice."""

    # -- seeding ---------------------------------------------------------------------------------
    def seed_int(self, seed: str) -> int:
        """A 64-bit number from the seed, salted with the env's name; stable across processes."""
        return stable_int(f"{type(self).env_name or type(self).__name__}:{seed}")

    def rng(self, seed: str) -> random.Random:
        """A ``random.Random`` for the seed: string seeding is SHA-512 based, so stable too."""
        return random.Random(f"{type(self).env_name or type(self).__name__}:{seed}")


def _unknown(cls: type[EnvKit], name: str) -> str:
    label = cls.env_name or cls.__name__
    known = list(cls.options_declared)
    close = difflib.get_close_matches(name, known, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    listed = f"its options are {', '.join(known)}" if known else "it takes no options"
    return f"{label} has no option {name!r}{hint}; {listed}."


def option_specs(factory: Any) -> list[OptionSpec]:
    """The declared options of an env factory: a kit class's options, [] for anything else."""
    if isinstance(factory, type) and issubclass(factory, EnvKit):
        return [option.spec() for option in factory.options_declared.values()]
    return []


__all__ = [
    "EnvKit",
    "Option",
    "OptionError",
    "OptionSpec",
    "OptionTypeError",
    "option_specs",
    "stable_int",
]

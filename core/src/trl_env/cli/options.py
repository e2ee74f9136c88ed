"""Options shared by several commands, generated from their declarations, and ``key=value``."""

from __future__ import annotations

import dataclasses
import enum
import importlib.util
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import click
import yaml

from ..errors import UsageError
from ..yamlfile import bounded_yaml

F = TypeVar("F", bound=Callable[..., Any])


def parse_kv(pairs: Iterable[str], what: str = "option", labelled: bool = False) -> dict[str, Any]:
    """``["size=7", "shaped=no"]`` -> ``{"size": 7, "shaped": False}``: values are YAML scalars.

    Lists (``modules=[q_proj, v_proj]``) are allowed; mappings, repeated keys and keys that are
    not Python names are refused, since a plugin option can be none of those. ``labelled``
    allows ``LABEL.KEY`` (a mixture's env label, then the option).
    """
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        name = key.partition(".")[2] if labelled and "." in key else key
        if not sep or not name.isidentifier():
            raise UsageError(f"Expected {what} as key=value with a name for key, got {pair!r}.")
        if key in out:
            raise UsageError(f"{what} {key!r} is given twice.")
        try:  # within bounds: a value of a few bytes may hold an alias bomb
            parsed = bounded_yaml(value, f"{what} {key}") if value.strip() else ""
        except yaml.YAMLError:
            parsed = value  # not YAML: take the text as it is
        if isinstance(parsed, dict):
            raise UsageError(f"{what} {key}={value!r} is a mapping; quote it if it is text.")
        out[key] = parsed
    return out


ENV_HELP = (
    "Registered environment name (see `trl-env list`); repeat it for a mixture, NAME:WEIGHT "
    "to weight one (--env sokoban --env wordle:2)."
)
ENV_ARG_HELP = "Env option (repeatable); in a mixture LABEL.KEY=VALUE (sokoban.boxes=2)."


def _key_values(flag: str, dest: str, help: str) -> Callable[[F], F]:
    """A repeatable ``KEY=VALUE`` option (read by :func:`parse_kv`)."""
    return click.option(flag, dest, multiple=True, metavar="KEY=VALUE", help=help)


def env_options(f: F) -> F:
    """One env: ``--env NAME`` (required) and its ``--env-arg``s."""
    f = _key_values(
        "--env-arg", "env_args", "Option passed to the environment factory (repeatable)."
    )(f)
    return click.option(
        "--env", "env_name", required=True, help="Registered environment name (see `trl-env list`)."
    )(f)


def mixture_options(f: F) -> F:
    """One env or a mixture: ``--env NAME[:WEIGHT]`` repeated, see :func:`env_layer`."""
    f = _key_values("--env-arg", "env_args", ENV_ARG_HELP)(f)
    return click.option(
        "--env", "env_specs", multiple=True, metavar="NAME[:WEIGHT]", help=ENV_HELP
    )(f)


def env_layer(specs: tuple[str, ...], env_args: tuple[str, ...]) -> dict[str, Any]:
    """``--env`` (repeated for a mixture) and ``--env-arg`` as config keys: ``env`` and
    ``env_args`` for one env, ``envs`` (each with its options) for several."""
    from ..mixture import parse_spec

    options = parse_kv(env_args, "--env-arg", labelled=len(specs) > 1)
    if len(specs) <= 1:
        out: dict[str, Any] = {"env_args": options}
        if specs:
            out["env"] = parse_spec(specs[0]).label
        return out
    entries = [parse_spec(s) for s in specs]
    per_env: dict[str, dict[str, Any]] = {e.label: {} for e in entries}
    for key, value in options.items():
        label, dot, name = key.partition(".")
        if not dot or label not in per_env:
            raise UsageError(
                f"--env-arg {key}=... in a mixture names its env: LABEL.KEY=VALUE with LABEL one "
                f"of {', '.join(per_env)}."
            )
        per_env[label][name] = value
    return {
        "envs": [{"env": e.label, "weight": e.weight, "options": per_env[e.label]} for e in entries]
    }


def _processor_options(required: bool) -> Callable[[F], F]:
    def decorate(f: F) -> F:
        f = _key_values(
            "--processor-arg",
            "processor_args",
            "Option passed to the processor factory (repeatable).",
        )(f)
        return click.option(
            "--processor",
            "processor_name",
            required=required,
            help="Registered processor name, one per chat format (e.g. qwen3, llama3.1, gemma3).",
        )(f)

    return decorate


processor_options = _processor_options(required=True)
# For commands that can also take the processor from a config file.
optional_processor_options = _processor_options(required=False)


def model_option(f: F) -> F:
    return click.option(
        "--model",
        cls=DeclaredOption,
        shown="tiny",
        help="Model id, local path, or `tiny` for the processor family's built-in offline model.",
    )(f)


def json_option(what: str = "the summary") -> Callable[[F], F]:
    """A command's ``--json`` flag (passed as ``as_json``): ``what`` it prints, as JSON."""
    return click.option("--json", "as_json", is_flag=True, help=f"Print {what} as JSON.")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _click_type(hint: Any) -> Any:
    """The click type of a dataclass annotation (its non-None part)."""
    args = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
    base = args[0]
    if isinstance(base, type) and issubclass(base, enum.Enum):
        return click.Choice([m.value for m in base])
    return {int: click.INT, float: click.FLOAT, bool: click.BOOL}.get(base, click.STRING)


def _shown(value: Any) -> str:
    return str(value.value if isinstance(value, enum.Enum) else value)


class DeclaredOption(click.Option):
    """An option whose value is None unless given, while ``--help`` shows its real default.

    Commands layer config files and their own defaults under the command line, so a flag must
    not fill in a default; ``shown`` is what the layers below would give.
    """

    def __init__(self, param_decls: list[str], shown: Any = None, **kw: Any) -> None:
        super().__init__(param_decls, **{"default": None, **kw})
        self.shown = shown

    def shown_default(self) -> Any:
        return self.shown

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        shown = self.shown_default()
        if shown is None:
            return super().get_help_record(ctx)
        saved = self.default, self.show_default
        self.default, self.show_default = _shown(shown), True
        try:
            return super().get_help_record(ctx)
        finally:
            self.default, self.show_default = saved


# Where --report-to may send a run's metrics (transformers' integrations by those names)
REPORTERS = ("tensorboard", "wandb", "none")


def report_to_list(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> list[str] | None:
    """``--report-to tensorboard,wandb`` as a trainer config's list; ``none`` is the empty list."""
    if value is None:
        return None
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in REPORTERS]
    if unknown or not names or ("none" in names and len(names) > 1):
        raise UsageError(
            f"--report-to {value}: give tensorboard, wandb or both (comma-separated), or none."
        )
    if "wandb" in names and importlib.util.find_spec("wandb") is None:
        raise UsageError(
            "--report-to wandb: wandb is not installed here; pip install wandb (then wandb "
            "login, or WANDB_MODE=offline)."
        )
    return [] if names == ["none"] else names


def rollout_options(
    exclude: Iterable[str] = (),
    shown: Mapping[str, str] | None = None,
    only: Iterable[str] | None = None,
) -> Callable[[F], F]:
    """One flag per :class:`~trl_env.config.RolloutConfig` field, generated from its declaration.

    Each flag's value is None unless given (see :class:`DeclaredOption`); ``--help`` shows the
    declared default, or ``shown[name]`` where a command changes it.
    """
    from ..config import RolloutConfig

    hints = typing.get_type_hints(RolloutConfig)
    skip = set(exclude)
    keep = None if only is None else set(only)

    def decorate(f: F) -> F:
        for spec in reversed(dataclasses.fields(RolloutConfig)):
            if spec.name in skip or (keep is not None and spec.name not in keep):
                continue
            repeated = spec.metadata.get("multiple", False)  # --env-server URL, repeatable
            f = click.option(
                spec.metadata.get("flag", _flag(spec.name)),
                spec.name,
                cls=DeclaredOption,
                type=_click_type(hints[spec.name]),
                shown=None if repeated else (shown or {}).get(spec.name, spec.default),
                help=spec.metadata["help"],
                **({"multiple": True, "callback": _none_if_empty} if repeated else {}),
            )(f)
        return f

    return decorate


def _none_if_empty(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """A repeatable flag not given is None, so the layers below it (config files) apply."""
    return tuple(value) or None


class GrpoOption(DeclaredOption):
    """A flag for one GRPOConfig field: help and default are TRL's, read only for ``--help``.

    Reading them (see :mod:`trl_env.training.grpo_fields`) parses TRL's sources, so it is done
    when help is shown, not when the command module is imported.
    """

    def __init__(
        self, param_decls: list[str], override: Mapping[str, Any] | None = None, **kw: Any
    ) -> None:
        super().__init__(param_decls, **kw)
        self.override = override or {}

    def shown_default(self) -> Any:
        from ..training.grpo_fields import grpo_fields

        if self.name in self.override:
            return self.override[str(self.name)]
        info = grpo_fields().get(str(self.name))
        return None if info is None else info.default

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        from ..training.grpo_fields import first_sentence, grpo_fields

        info = grpo_fields().get(str(self.name))
        if info is not None and not self.help:
            self.help = first_sentence(info.help)
        return super().get_help_record(ctx)


def grpo_option(
    field_name: str, flag: str | None = None, override: Mapping[str, Any] | None = None, **kw: Any
) -> Callable[[F], F]:
    """A flag setting GRPOConfig's ``field_name`` (its value arrives under that name)."""
    return click.option(
        flag or _flag(field_name), field_name, cls=GrpoOption, override=override, **kw
    )


def figures_table(title: str) -> Any:
    """A rich table of label and figure rows under ``title``, no header: a run's closing
    summary (train, sft)."""
    from rich.table import Table

    table = Table(title=title, show_header=False)
    table.add_column("")
    table.add_column("", justify="right")
    return table

"""The ``trl-env`` command group: one readable line for user errors, plugin commands added.

Start-up is kept at the floor (importing click and pluggy and scanning entry points): a command
module is imported only when that command runs (``trl-env --help`` and tab completion of a
command's name show the summaries below instead), and hook plugins are loaded only when the
command list is needed (``--help``, completion, a name that is not built in) or when a command
fires a hook. tests/test_import_guard.py holds what each of these paths loads.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any, NoReturn

import click

from ..errors import TrlEnvError

if TYPE_CHECKING:
    from click.shell_completion import CompletionItem

# name -> "module:attribute"; each module stays light at import time.
_COMMANDS = {
    "list": "trl_env.cli.list_cmd:list_cmd",
    "check": "trl_env.cli.check_cmd:check_cmd",
    "eval": "trl_env.cli.eval_cmd:eval_cmd",
    "train": "trl_env.cli.train_cmd:train_cmd",
    "sft": "trl_env.cli.sft_cmd:sft_cmd",
    "play": "trl_env.cli.play_cmd:play_cmd",
    "new": "trl_env.cli.new_cmd:new_cmd",
    "view": "trl_env.cli.view_cmd:view_cmd",
    "compare": "trl_env.cli.compare_cmd:compare_cmd",
}

# The first paragraph of each command's help, for `trl-env --help`: importing the eight command
# modules (their option declarations and defaults) would cost more than all the rest of start-up.
# core/tests/test_startup.py checks that each matches the command's own help; a command missing
# here is imported to list it.
_SUMMARIES = {
    "list": "List installed environments, processors, backends and plugins.",
    "check": "Check that a processor renders exactly what a tokenizer's chat template renders.",
    "eval": "Play EPISODES episodes of an environment with a model and print a summary.",
    "train": "Train a model with GRPO on an environment, using trl-env's multi-turn rollouts.",
    "sft": "Warm a model up on an env's demonstrations with TRL's SFTTrainer, before RL.",
    "play": "Play an environment yourself: type an action per line; `quit` or end of input stops.",
    "new": "Create a new environment or processor package, ready to `pip install -e`.",
    "view": "Write an offline HTML report: summary, plots and every episode as a conversation.",
    "compare": "Compare the rewards of run B against run A, seed by seed.",
}

# Top-level modules of the `trl-env[train]` extra: a command that meets one missing says so.
TRAINING_STACK = frozenset(
    {"torch", "transformers", "trl", "peft", "accelerate", "datasets", "tokenizers", "tensorboard"}
)
# What the built-in commands of a light install cannot run without, checked before they start
# so that the missing extra is the first thing said (not, say, an unknown processor).
_NEEDS = {
    "check": ("transformers",),
    "eval": ("torch", "transformers"),
    "train": ("torch", "transformers", "trl"),
    "sft": ("torch", "transformers", "trl", "datasets"),
}


class TrlEnvGroup(click.Group):
    """Built-in commands imported on demand, plugin commands added once, user errors as one line."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._builtins: dict[str, click.Command] = {}
        self._plugins_of: object = None  # the plugin manager whose commands are in self.commands

    def _plugin_commands(self) -> MutableMapping[str, click.Command]:
        from ..plugins import manager

        pm = manager()
        if self._plugins_of is not pm:  # first use, or a test started a fresh manager
            self.commands.clear()
            self._plugins_of = pm
            pm.add_commands(self)
        return self.commands

    def _builtin(self, name: str) -> click.Command | None:
        if name not in self._builtins:
            module, attr = _COMMANDS[name].split(":")
            try:
                mod = importlib.import_module(module)
            except ModuleNotFoundError as exc:
                if exc.name != module:
                    raise
                return None  # command not part of this build
            self._builtins[name] = getattr(mod, attr)
        return self._builtins[name]

    def list_commands(self, ctx: click.Context) -> list[str]:
        builtins = [name for name in _COMMANDS if _present(name)]
        return sorted(set(builtins) | set(self._plugin_commands()))

    def _listed(self, ctx: click.Context, name: str) -> click.Command | None:
        """The command as a listing shows it: a built-in one not yet imported by its summary."""
        if name in _SUMMARIES and name not in self._builtins:
            return click.Command(name, help=_SUMMARIES[name])
        return self.get_command(ctx, name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Click's own listing, with built-in commands summarized without importing them."""
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = []
        for name in names:
            cmd = self._listed(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[CompletionItem]:
        """Command names as click completes them, without importing a built-in command: the
        shell runs this on each key press."""
        from click.shell_completion import CompletionItem

        found = []
        for name in self.list_commands(ctx):
            cmd = self._listed(ctx, name) if name.startswith(incomplete) else None
            if cmd is not None and not cmd.hidden:
                found.append(CompletionItem(name, help=cmd.get_short_help_str()))
        return found + click.Command.shell_complete(self, ctx, incomplete)  # the group's options

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name, cmd, rest = super().resolve_command(ctx, args)
        if ctx.resilient_parsing or any(a in ("-h", "--help") for a in rest):
            return name, cmd, rest  # tab completion and help run nothing: nothing to check
        missing = [m for m in _NEEDS.get(name or "", ()) if importlib.util.find_spec(m) is None]
        if missing:
            _missing_stack(name or "", missing[0])
        if "trl" in _NEEDS.get(name or "", ()):
            from ..trl_compat import check_trl

            check_trl()  # a TRL outside the supported range: one sentence, before torch loads
        return name, cmd, rest

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in _COMMANDS:  # built-ins first: a plugin cannot shadow one
            return self._builtin(cmd_name)
        return self._plugin_commands().get(cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        from .. import streams

        streams.pin()  # before any env code runs: an env's redirection cannot take our output
        try:
            return super().invoke(ctx)
        except TrlEnvError as exc:
            from ..redact import redact_text

            click.secho(f"Error: {redact_text(str(exc))}", file=streams.err(), fg="red")
            ctx.exit(exc.exit_code)
        except ModuleNotFoundError as exc:
            top = (exc.name or "").split(".")[0]
            if top not in TRAINING_STACK:
                raise
            _missing_stack(ctx.invoked_subcommand or "", top)
        except KeyboardInterrupt:
            click.echo("Interrupted.", err=True)
            ctx.exit(130)


@click.group(cls=TrlEnvGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="trl-env", prog_name="trl-env")  # read only for --version
def cli() -> None:
    """Train LLM agents with RL in text environments, on top of TRL.

    Environments and model processors are plugins resolved by name: install
    trl-env-qwen and trl-env-sokoban, then `trl-env train --env sokoban --processor qwen3`.

    TRL_ENV_PLUGINS (a comma list of distributions or plugin names; empty for none) limits the
    plugins loaded; a hook plugin that takes over TRL_ENV_PLUGIN_TIMEOUT seconds (default 10)
    to import, or to return from a register_* hook, is left out.
    """


# torch as the README installs it on a CPU machine: from the package index, pip would pick a CUDA
# build of gigabytes, so a machine without torch is told this line first
TORCH_CPU = "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"
TRAIN_EXTRA = "pip install './core[train]'"  # from a checkout: nothing is published yet


def _missing_stack(command: str, module: str) -> NoReturn:
    """Say what to install, torch first where it is missing, in one sentence, and exit 2."""
    extra = f"the train extra, in a checkout of trl-env: {TRAIN_EXTRA}"
    if importlib.util.find_spec("torch") is None:
        extra = (
            f"torch first, for your hardware ({TORCH_CPU} on CPU; a CUDA build for a GPU, see "
            f"the README), then {extra}"
        )
    click.secho(
        f"Error: `trl-env {command}` needs the training stack, and {module} is not installed: "
        f"install {extra}.",
        err=True,
        fg="red",
    )
    raise click.exceptions.Exit(2)


def _present(name: str) -> bool:
    """Whether a built-in command's module exists in this build (found, not imported)."""
    return importlib.util.find_spec(_COMMANDS[name].split(":")[0]) is not None


def main() -> None:
    cli(prog_name="trl-env")

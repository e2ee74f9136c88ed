"""Usage errors found before the training stack is imported: a typo costs a second, not ten.

Env and processor names are looked up in the registry (which imports only the plugin named),
env-kit options are checked against their declarations without building an env, and the
rollout options against :class:`~trl_env.config.RolloutConfig`'s own checks. What can only be
known later (a model's tokenizer, a plugin's own option checks) is still checked where it is
built; this is a fast first pass, not the only one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

from ..errors import UsageError

if TYPE_CHECKING:
    from ..config import RolloutConfig


def check_layer(layer: Mapping[str, Any], where: str = "options") -> None:
    """Names, env options and rollout values of a config layer (``env``/``envs``, ...)."""
    from ..config import Credit
    from ..training.config import canonical_envs

    if layer.get("envs"):
        entries = canonical_envs(layer["envs"], where)
    elif layer.get("env"):
        entries = [{"env": layer["env"], "options": dict(layer.get("env_args") or {})}]
    else:
        entries = []
    rollout = layer.get("rollout")
    config = check_rollout(rollout if isinstance(rollout, Mapping) else {})
    for entry in entries:
        options = dict(entry.get("options") or {})
        check_env(entry["env"], options, config)
        for stage in _stages(entry.get("curriculum")):
            check_env(entry["env"], {**options, **stage}, config)
    if layer.get("processor"):
        check_processor(str(layer["processor"]))
    if layer.get("asynchronous") and config.credit is Credit.TURN:
        raise UsageError(
            "--credit turn is not available with --async: TRL's AsyncGRPOTrainer takes one "
            "advantage per episode; train without --async, or with --credit episode."
        )
    grpo = layer.get("grpo")
    if isinstance(grpo, Mapping) and grpo:
        check_grpo_names(grpo)
    check_groups(grpo if isinstance(grpo, Mapping) else {})
    if layer.get("model"):
        check_model(str(layer["model"]))
    if layer.get("backend"):
        check_backend(str(layer["backend"]))


def check_grpo_names(grpo: Mapping[str, Any]) -> None:
    """GRPOConfig option names, read from TRL's source (its types are checked with TRL)."""
    import difflib

    from ..training.grpo_fields import grpo_fields

    known = grpo_fields()
    if not known:  # TRL's sources could not be read: the typed check after import says it
        return
    for key in grpo:
        if key not in known:
            close = difflib.get_close_matches(str(key), list(known), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise UsageError(f"{key!r} is not a GRPOConfig option.{hint}")


def check_groups(grpo: Mapping[str, Any]) -> None:
    """The generation batch splits into GRPO groups (the same rule as the run's own check)."""
    import os

    from ..training.config import GRPO_DEFAULTS

    values = {**GRPO_DEFAULTS, **grpo}
    batch, groups = values.get("per_device_train_batch_size"), values.get("num_generations")
    per_generation = values.get("steps_per_generation") or 1
    if not (_positive_int(batch) and _positive_int(groups) and _positive_int(per_generation)):
        return  # a bad type or value: the config's own checks say it
    processes = int(os.environ.get("WORLD_SIZE", "1"))
    total = batch * per_generation * processes
    if total % groups:
        raise UsageError(
            f"The generation batch ({total} = batch size x steps_per_generation x {processes} "
            f"process(es)) is not a multiple of num_generations ({groups}); "
            "change --batch-size or --num-generations."
        )


def _positive_int(value: Any) -> TypeGuard[int]:
    return type(value) is int and value > 0


def check_model(model: str, flag: str = "--model") -> None:
    """A local path exists; a hub id can be had (cached, or the hub answers) within seconds."""
    from ..hub import check_reachable

    if model in ("tiny", "smollm2"):  # built or converted locally
        return
    if looks_local(model):
        path = Path(model).expanduser()
        if not path.exists():
            raise UsageError(missing_path(flag, model))
        if path.is_file() and path.suffix.lower() != ".gguf":
            raise UsageError(
                f"{flag} {model} is a file, not a model: give a model directory, a .gguf "
                "file, a hub id, tiny or smollm2."
            )
        if path.is_dir() and not any(
            (path / name).is_file() for name in ("config.json", "adapter_config.json")
        ):
            raise UsageError(
                f"{flag} {model} holds no config.json, so it is not a saved model "
                "(save_pretrained writes one)."
            )
        return
    check_reachable(model)


def looks_local(name: str) -> bool:
    """Whether a model or tokenizer name is a local path rather than a hub id: one a hub id
    cannot be (absolute, ``./``, ``~``, two slashes or more, a trailing slash), one that exists
    here, or one whose folder exists here (``runs/x/final`` before the run wrote it)."""
    if name.startswith((".", "/", "~")) or name.count("/") > 1 or name.endswith("/"):
        return True
    path = Path(name).expanduser()
    return path.exists() or ("/" in name and path.parent.is_dir())


def missing_path(flag: str, name: str) -> str:
    """One sentence for a local model path that does not exist, naming its folder: for a run
    folder whose model is not written yet (a run stopped early), its last checkpoint (a model
    too) and how to carry the run on; else the closest entry of the folder, or the first folder
    of the path that does not exist."""
    import difflib

    path = Path(name).expanduser()
    run = path.parent
    if path.name == "final" and (run / "config.yaml").is_file():
        return f"{flag} {name} does not exist: {_unfinished(run, flag)}"
    if not run.is_dir():
        missing = next(p for p in reversed([path, *path.parents]) if not p.exists())
        return f"{flag} {name}: no such file or directory ({missing} does not exist)."
    close = difflib.get_close_matches(path.name, [p.name for p in run.iterdir()], n=1)
    hint = f"; did you mean {run / close[0]}?" if close else "."
    where = "the current folder" if str(run) == "." else run
    return f"{flag} {name}: no such file or directory in {where}{hint}"


def _unfinished(run: Path, flag: str) -> str:
    """What a run folder without its model holds instead: a train run's newest whole checkpoint
    and the command that carries the run on; an sft run's command to run it again."""
    from ..training import checkpoints, rundir
    from ..yamlfile import read_mapping

    try:
        command = read_mapping(run / "config.yaml").get("command")
    except (UsageError, OSError):  # an unreadable config: say what the folder lacks all the same
        command = None
    if command == "sft":
        return (
            f"the sft run in {run} did not end (it saves its model to final/ when it does); run "
            f"it again with: trl-env sft --config {run / 'config.yaml'} --overwrite."
        )
    whole = [c for c in checkpoints.checkpoints(run) if checkpoints.problem(c) is None]
    if not whole:
        return (
            f"the run in {run} did not end (it saves its model to final/ when it does) and saved "
            f"no checkpoint; start it again with: {rundir.next_command(run)}."
        )
    return (
        f"the run in {run} did not end (it saves its model to final/ when it does); its last "
        f"checkpoint is a model too ({flag} {whole[0]}), or carry the run on with: "
        f"{rundir.next_command(run)}."
    )


def check_backend(name: str) -> None:
    """A registered generation backend (listed from plugin metadata, nothing heavy imported)."""
    from ..plugins import manager

    manager().backend(name)  # PluginNotFoundError (exit 2) names the available ones


def check_env(name: str, options: Mapping[str, Any], config: RolloutConfig | None = None) -> None:
    """The env is installed, and an env kit's declared options take these values. An env that
    runs elsewhere under ``config`` (worker processes, servers) is looked up in metadata only:
    its code must not run here, so its own host checks its options at start-up."""
    from ..envkit import EnvKit, _unknown
    from ..registry import envs

    if config is not None and runs_elsewhere(config, name):
        envs.require(name)  # PluginNotFoundError (exit 2) names the installed ones
        return
    factory = envs.factory(name)  # PluginNotFoundError (exit 2) names the installed ones
    if not (isinstance(factory, type) and issubclass(factory, EnvKit)):
        return  # options of other factories are only known by calling them
    declared = factory.options_declared
    for key, value in options.items():
        if key not in declared:
            raise UsageError(_unknown(factory, key))
        declared[key].check(value)  # OptionError: exit 2, the option's own sentence


def check_processor(name: str) -> None:
    from ..registry import processors

    processors.factory(name)


def check_rollout(rollout: Mapping[str, Any]) -> RolloutConfig:
    """Rollout values a user gave, checked as :class:`RolloutConfig` will check them, and the
    kind of env host they choose; the config."""
    from ..hosts import host_kind

    config = rollout_config(rollout)
    host_kind(config)  # a kind no plugin registers, or two options that disagree: one sentence
    return config


def rollout_config(rollout: Mapping[str, Any]) -> RolloutConfig:
    """The :class:`RolloutConfig` of the rollout values a user gave (flags, a config file's
    ``rollout:``), each coerced to its declared type; unknown keys are said by the config."""
    import dataclasses
    import typing

    from ..config import RolloutConfig
    from ..training.values import coerce_all

    known = {f.name for f in dataclasses.fields(RolloutConfig)}
    given = {k: v for k, v in rollout.items() if k in known}
    typed = coerce_all("rollout.", given, typing.get_type_hints(RolloutConfig))
    return RolloutConfig(**typed).validate()


def runs_elsewhere(config: RolloutConfig, env: str) -> bool:
    """Whether the env ``env`` of a run with ``config`` runs outside this process (any kind of
    host but ``thread``), where its package must not be imported here."""
    from ..config import Isolation
    from ..hosts import host_kind

    return host_kind(config, env) != Isolation.THREAD


def _stages(curriculum: Any) -> Iterable[Mapping[str, Any]]:
    """A curriculum's stages, each a mapping of env options (as ``canonical_envs`` wrote it)."""
    stages = curriculum.get("stages") if isinstance(curriculum, Mapping) else None
    for stage in stages or []:
        if isinstance(stage, Mapping):
            yield stage

"""The configuration of a training run: layers of options resolved into one checked record.

Defaults are declared once: rollout options in :class:`trl_env.config.RolloutConfig`, GRPO
options by GRPOConfig itself (TRL) with :data:`GRPO_DEFAULTS` for the few trl-env changes, the
rest in :class:`TrainConfig`. Layers, each sparse (only what it sets): trl-env's defaults
(lighter for the tiny model), the saved config of a resumed run, ``--demo``, ``--config FILE``,
then the command line. The resolved record is saved as ``OUTPUT_DIR/config.yaml``, which is
itself a valid ``--config`` file.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import typing
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from ..config import SAMPLING_FIELDS, RolloutConfig
from ..curriculum import Curriculum
from ..errors import UsageError
from ..mixture import Mixture, config_mixture
from ..redact import MASK, masked_keys, redact
from ..spec import EnvSpec
from ..yamlfile import read_mapping
from .values import coerce, coerce_all

# trl-env's choices where GRPOConfig's own default does not suit an env run; every other
# GRPOConfig field keeps TRL's default.
GRPO_DEFAULTS: dict[str, Any] = {
    "per_device_train_batch_size": 8,
    "num_generations": 4,
    "learning_rate": 1e-5,
    "max_steps": 100,
    "logging_steps": 1,
    "save_steps": 50,
    "save_total_limit": 2,
    "report_to": ["tensorboard"],
    "beta": 0.0,
    "seed": 0,
}

# With --model tiny (a random model of a few MB, on CPU) long turns only cost time: its
# turns are noise after a few tokens, so they are cut short.
TINY_DEFAULTS: dict[str, dict[str, Any]] = {
    "rollout": {"max_new_tokens": 16},
}

LORA_DEFAULTS: dict[str, Any] = {
    "r": 16,
    "alpha": 32,
    "dropout": 0.0,
    "target_modules": "all-linear",
}


def target_modules(given: str) -> list[str]:
    """``--lora-target-modules q_proj,v_proj`` as a list of names (``all-linear``: one name)."""
    names = [n.strip() for n in given.split(",") if n.strip()]
    if not names:
        raise UsageError("--lora-target-modules is empty; name modules, or give all-linear.")
    return names


def lora_config(lora: dict[str, Any] | None) -> Any:
    """peft's ``LoraConfig`` of trl-env's LoRA options (r, alpha, dropout, target_modules);
    None: the whole model is trained."""
    if lora is None:
        return None
    try:
        from peft import LoraConfig
    except ImportError:
        raise UsageError(
            "--lora needs peft, which is not installed: pip install peft (or train the whole "
            "model without --lora)."
        ) from None
    lora = {**LORA_DEFAULTS, **lora}
    modules = lora["target_modules"]
    if isinstance(modules, list | tuple) and list(modules) == ["all-linear"]:
        modules = "all-linear"  # peft knows it only as a string; as a list it is a module name
    return LoraConfig(
        r=int(lora["r"]),
        lora_alpha=int(lora["alpha"]),
        lora_dropout=float(lora["dropout"]),
        target_modules=modules,
        task_type="CAUSAL_LM",
    )


# Options a resumed run may change: how long it goes on and how it logs and saves.
RESUMABLE = frozenset(
    {
        "grpo.max_steps",
        "grpo.save_steps",
        "grpo.logging_steps",
        "grpo.save_total_limit",
        "grpo.report_to",
        "output_dir",  # the run resumed is the one in it, however its path is spelt
        "check",
        "eval_every",
    }
)

SECTIONS = ("env_args", "processor_args", "rollout", "grpo", "lora")
# Rollout options a training run takes from its GRPOConfig instead (TRL recomputes the
# logprobs with the trainer's own sampling options, so there is one source for them).
TRAINER_OWNED = (*SAMPLING_FIELDS, "seed")


@dataclass
class TrainConfig:
    """A resolved training run; the YAML config file and ``config.yaml`` have the same keys."""

    env: str = field(default="", metadata={"help": "Registered environment name."})
    # A mixture (several envs, or one with a curriculum): ENTRY_KEYS each; ``env`` is then
    # their labels joined by "+" (the default output folder's name).
    envs: list[dict[str, Any]] = field(default_factory=list)
    processor: str = field(default="", metadata={"help": "Registered processor name."})
    model: str = field(default="tiny", metadata={"help": "Model id, local path, or `tiny`."})
    backend: str = field(default="transformers", metadata={"help": "Generation backend."})
    env_args: dict[str, Any] = field(default_factory=dict)
    processor_args: dict[str, Any] = field(default_factory=dict)
    output_dir: str = field(default="", metadata={"help": "Default: runs/ENV-PROCESSOR."})
    train_seeds: int = field(
        default=2048,
        metadata={"help": "Dataset rows: training seeds (of each env, drawn by weight)."},
    )
    eval_every: int = field(
        default=0,
        metadata={"help": "Every N steps, play held-out seeds of each env and log them; 0: off."},
    )
    eval_seeds: int = field(
        default=4, metadata={"help": "Held-out evaluation seeds per env (with --eval-every)."}
    )
    rollout: dict[str, Any] = field(default_factory=dict)  # RolloutConfig fields
    grpo: dict[str, Any] = field(default_factory=dict)  # GRPOConfig fields
    lora: dict[str, Any] | None = None  # r, alpha, dropout, target_modules; None: full model
    check: bool = True  # refuse a processor that does not fit the model's tokenizer
    asynchronous: bool = False  # TRL's AsyncGRPOTrainer fed by EnvRolloutWorker (docs/async.md)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def rollout_config(self) -> RolloutConfig:
        sampling = {k: self.grpo[k] for k in SAMPLING_FIELDS if self.grpo.get(k) is not None}
        return RolloutConfig(**self.rollout, **sampling).validate()

    def grpo_args(self) -> dict[str, Any]:
        return dict(self.grpo)

    def mixture(self) -> Mixture:
        """The run's envs: the ``envs`` list, or ``env`` with ``env_args`` alone."""
        return config_mixture(self.envs, self.env, self.env_args)


# The keys of one env of a mixture (``envs:`` in a config file).
ENTRY_KEYS = ("env", "name", "weight", "options", "processor_args", "max_turns", "curriculum")


def canonical_envs(envs: Any, where: str) -> list[dict[str, Any]]:
    """``envs`` checked and written out in full (every key), so saved runs compare equal."""
    if not isinstance(envs, list):
        raise UsageError(
            f"envs in the {where} must be a list of envs, each NAME or a mapping "
            "(env, name, weight, options, processor_args, max_turns, curriculum)."
        )
    out = []
    for item in envs:
        entry = {"env": item} if isinstance(item, str) else item
        if not isinstance(entry, dict):
            raise UsageError(f"Each of envs in the {where} is NAME or a mapping, not {item!r}.")
        for key in entry:
            if key not in ENTRY_KEYS:
                raise UsageError(
                    _unknown(f"Unknown key {key!r} of envs", str(key), ENTRY_KEYS, where)
                )
        if not isinstance(entry.get("env"), str) or not entry["env"]:
            raise UsageError(f"Each of envs in the {where} needs `env: NAME`; got {item!r}.")
        for key in ("options", "processor_args"):
            if not isinstance(entry.get(key) or {}, dict):
                raise UsageError(f"{key} of {entry['env']} in the {where} must be a mapping.")
        label = entry.get("name") or entry["env"]
        curriculum = entry.get("curriculum")
        if curriculum is not None:
            curriculum = Curriculum.from_dict(curriculum, f"env {label}").to_dict()
        try:
            weight = float(entry.get("weight", 1.0))
            turns = entry.get("max_turns")
            turns = None if turns is None else int(turns)
        except (TypeError, ValueError):
            raise UsageError(
                f"weight and max_turns of {label} in the {where} are numbers."
            ) from None
        out.append(
            {
                "env": entry["env"],
                "name": str(entry.get("name") or ""),
                "weight": weight,
                "options": dict(entry.get("options") or {}),
                "processor_args": dict(entry.get("processor_args") or {}),
                "max_turns": turns,
                "curriculum": curriculum,
            }
        )
    Mixture([EnvSpec.from_dict(e) for e in out])  # names, weights and duplicates, checked once
    return out


def envs_label(envs: list[dict[str, Any]]) -> str:
    """A mixture's name: its env labels joined by "+" (``env`` of a mixed run, its folder)."""
    return "+".join(EnvSpec.from_dict(e).label for e in envs)


def default(name: str) -> Any:
    """The declared default of a :class:`TrainConfig` field (for ``--help``)."""
    f = TrainConfig.__dataclass_fields__[name]
    return f.default


def _rollout_defaults() -> dict[str, Any]:
    return {f.name: f.default for f in fields(RolloutConfig) if f.name not in TRAINER_OWNED}


def defaults(model: str) -> dict[str, Any]:
    """The bottom layer: every option's default, lighter ones for the tiny model."""
    base = {f.name: f.default for f in fields(TrainConfig) if f.name not in SECTIONS}
    layer: dict[str, Any] = {
        **base,
        "env_args": {},
        "processor_args": {},
        "rollout": _rollout_defaults(),
        "grpo": dict(GRPO_DEFAULTS),
        "lora": None,
    }
    if model in ("", "tiny"):
        layer = merge(layer, TINY_DEFAULTS)
    return layer


def merge(low: dict[str, Any], high: dict[str, Any]) -> dict[str, Any]:
    """``high`` over ``low``; sections merge key by key and None means "not given"."""
    out = dict(low)
    for key, value in high.items():
        if value is None and key != "lora":
            continue
        if key in SECTIONS and isinstance(out.get(key), dict) and isinstance(value, dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    # One layer's env replaces a lower layer's mixture, and the other way round.
    if high.get("envs"):
        out["env"] = high.get("env") or ""
    elif high.get("env"):
        out["envs"] = []
    return out


def resolve(given: dict[str, Any], saved: dict[str, Any] | None = None) -> TrainConfig:
    """One :class:`TrainConfig` from the explicit layers (``given``, already merged).

    GRPO options are checked against GRPOConfig's fields and types, which imports TRL.

    With ``saved`` (a resumed run's config.yaml), ``given`` may only change :data:`RESUMABLE`
    options: anything else would train a different run in the same directory.
    """
    given = _trainer_owned_sampling(given)
    if given.get("grpo"):  # typed before comparing with a saved run (YAML's "2e-5" is text)
        given = {**given, "grpo": check_grpo(given["grpo"])}
    if saved is not None:
        saved = _trainer_owned_sampling(check_keys(saved, "the saved config"))
        _refuse_changes(given, saved)
        data = merge(saved, given)
    else:
        data = merge(defaults(given.get("model") or "tiny"), given)
    _refuse_masked(data, resumed=saved is not None)
    if data.get("lora") is not None:
        data["lora"] = {**LORA_DEFAULTS, **data["lora"]}
    if data.get("grpo", {}).get("use_vllm"):
        data["backend"] = "vllm"
    elif data.get("backend") == "vllm":  # vLLM in training is TRL's engine, weights synced by TRL
        data["grpo"] = {**data["grpo"], "use_vllm": True}
    cfg = TrainConfig(**typed(data, "config"))
    return _validated(cfg)


def _trainer_owned_sampling(layer: dict[str, Any]) -> dict[str, Any]:
    """Sampling options given under ``rollout`` move to ``grpo``, where the trainer reads them."""
    rollout = dict(layer.get("rollout") or {})
    moved = {k: rollout.pop(k) for k in TRAINER_OWNED if k in rollout}
    if not moved:
        return layer
    grpo = dict(layer.get("grpo") or {})
    for key, value in moved.items():
        if key in grpo and grpo[key] != value:
            raise UsageError(
                f"rollout.{key} is {value!r} but grpo.{key} is {grpo[key]!r}; a training run "
                f"samples with the trainer's options, so give {key} once."
            )
        grpo[key] = value
    return {**layer, "rollout": rollout, "grpo": grpo}


def _refuse_changes(given: dict[str, Any], saved: dict[str, Any]) -> None:
    for key, value in flatten(given).items():
        if key in RESUMABLE:
            continue
        old = flatten(saved).get(key, _UNSET)
        # The saved config holds URLs with their secrets masked: the same flags, secrets
        # included, are the same run. A list and a tuple of the same URLs too.
        if old is not _UNSET and _comparable(old) != _comparable(value):
            raise UsageError(
                f"--resume: {key} is {redact(value)!r} here but {redact(old)!r} in the saved "
                "config.yaml; resume with the saved options (only max_steps, save and logging "
                "options may change), or start afresh with --overwrite."
            )


def _comparable(value: Any) -> Any:
    value = redact(value)
    return list(value) if isinstance(value, tuple) else value


def _refuse_masked(data: dict[str, Any], resumed: bool) -> None:
    """A saved config's URL whose secret was masked when it was written cannot be played:
    the secret must come again with its flag."""
    masked = list(masked_keys(data))
    if masked:
        how = "--resume" if resumed else "This config"
        raise UsageError(
            f"{how}: {', '.join(masked)} holds a URL whose secret a run never saves (shown as "
            f"{MASK}); give it again with its secret (its flag, e.g. --env-server URL or "
            "--env-arg url=URL), or pass the server's token in its environment variable."
        )


_UNSET = object()


def flatten(data: dict[str, Any]) -> dict[str, Any]:
    """``{"grpo": {"seed": 0}}`` -> ``{"grpo.seed": 0}``: one level, for comparing configs."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key in SECTIONS and isinstance(value, dict):
            out.update({f"{key}.{k}": v for k, v in value.items()})
        elif value is not None:
            out[key] = value
    return out


def typed(data: dict[str, Any], where: str) -> dict[str, Any]:
    """Top-level and rollout values coerced to their declared types (GRPO: see run)."""
    hints = typing.get_type_hints(TrainConfig)
    out = {
        key: coerce(key, value, hints[key])
        if key in hints and key not in (*SECTIONS, "envs")
        else value
        for key, value in data.items()
    }
    if out.get("envs"):
        out["envs"] = canonical_envs(out["envs"], where)
    rollout = out.get("rollout") or {}
    known = {f.name for f in fields(RolloutConfig)}
    for key in rollout:
        if key not in known:
            raise UsageError(_unknown(f"rollout option {key!r}", key, known, where))
    out["rollout"] = coerce_all("rollout.", rollout, typing.get_type_hints(RolloutConfig))
    for section in ("env_args", "processor_args", "grpo"):
        if not isinstance(out.get(section), dict):
            raise UsageError(f"{section} in the {where} must be a mapping of options.")
    if out.get("lora") is not None and not isinstance(out["lora"], dict):
        raise UsageError(f"lora in the {where} must be a mapping (r, alpha, dropout, ...).")
    return out


def _validated(cfg: TrainConfig) -> TrainConfig:
    if cfg.envs:
        joined = envs_label(cfg.envs)
        if cfg.env and cfg.env != joined:
            raise UsageError(
                f"The config gives env {cfg.env!r} and a list of envs ({joined}); give one of them."
            )
        cfg.env = joined
    if not cfg.env or not cfg.processor:
        raise UsageError("Name an environment and a processor: --env NAME --processor NAME.")
    if cfg.train_seeds < 1:
        raise UsageError(f"train_seeds is {cfg.train_seeds}; it must be at least 1.")
    for key in ("eval_every", "eval_seeds"):
        if getattr(cfg, key) < 0 or (key == "eval_seeds" and cfg.eval_seeds < 1):
            low = 0 if key == "eval_every" else 1
            raise UsageError(f"{key} is {getattr(cfg, key)}; it must be at least {low}.")
    cfg.rollout_config()  # the rollout options' own checks
    for key, low in (
        ("max_steps", 1),
        ("per_device_train_batch_size", 1),
        ("gradient_accumulation_steps", 1),
        ("steps_per_generation", 1),
        ("num_generations", 2),
    ):
        value = cfg.grpo.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value < low:
            why = " (GRPO compares episodes within a group)" if key == "num_generations" else ""
            raise UsageError(f"grpo.{key} is {value}; it must be at least {low}{why}.")
    for key in ("logging_steps", "save_steps"):
        value = cfg.grpo.get(key)
        if isinstance(value, int | float) and value <= 0:
            raise UsageError(f"grpo.{key} is {value}; it must be positive.")
    if not cfg.output_dir:
        cfg.output_dir = str(Path("runs") / f"{cfg.env}-{cfg.processor}")
    return cfg


def check_grpo(grpo: dict[str, Any]) -> dict[str, Any]:
    """GRPO options checked against GRPOConfig's fields and types (imports TRL)."""
    from trl import GRPOConfig

    hints = _grpo_hints(GRPOConfig)
    for key in grpo:
        if key not in hints:
            raise UsageError(_unknown(f"{key!r} is not a GRPOConfig option", key, hints, ""))
    return coerce_all("grpo.", grpo, hints)


def _grpo_hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except Exception:  # an annotation that does not resolve: fall back to the raw ones
        return {f.name: f.type for f in dataclasses.fields(cls)}


def _unknown(what: str, key: str, known: Any, where: str) -> str:
    place = f" in the {where}" if where else ""
    return f"{what}{place}.{_closest(key, known)}"


def _closest(key: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(key, list(known), n=1)
    return f" Did you mean {close[0]!r}?" if close else ""


def load_config(path: str | Path) -> dict[str, Any]:
    """Read a YAML config file as a layer of :class:`TrainConfig` keys; an sft run's
    config.yaml gives its env, processor and rollout options and its model (see sft_layer)."""
    data = read_mapping(Path(path))
    if data.get("command") == "sft":
        data = sft_layer(data, Path(path))
    return check_keys(data, f"config file {path}")


# What an sft run and the train or eval run after it share (the rest is SFT's own).
SFT_SHARED = ("env", "env_args", "processor", "processor_args", "rollout")


def sft_layer(data: dict[str, Any], path: Path) -> dict[str, Any]:
    """An sft run's config.yaml as a layer of train's (or eval's) options: the same env,
    processor and rollout options, and the model that run wrote, DIR/final, to go on from."""
    final = path.parent / "final"
    if not (final / "config.json").is_file():
        raise UsageError(
            f"Config file {path} is an sft run's, and {final} holds no model: that run did not "
            "finish (run it again with `trl-env sft --config ... --overwrite`)."
        )
    layer = {k: data[k] for k in SFT_SHARED if data.get(k) not in (None, {})}
    return {**layer, "model": str(final)}


def unknown_key(key: str, known: Iterable[str], where: str) -> UsageError:
    """The sentence for a config key that is not one of ``known``, with the closest one."""
    return UsageError(f"Unknown key {key!r} in {where}.{_closest(key, known)}")


def check_keys(data: dict[str, Any], where: str) -> dict[str, Any]:
    known = {f.name for f in fields(TrainConfig)}
    for key in data:
        if key not in known:
            section = section_of(str(key))
            if section:
                raise UsageError(
                    f"Unknown key {key!r} in {where}: it is an option of {section}, so it "
                    f"belongs under {section}: ({section}: {{{key}: {data[key]!r}}})."
                )
            raise unknown_key(str(key), known, where)
    for section in SECTIONS:
        value = data.get(section)
        if value is not None and not isinstance(value, dict):
            raise UsageError(f"{section} in {where} must be a mapping of options, not {value!r}.")
    return data


def section_of(key: str) -> str | None:
    """The section of a config file whose option ``key`` is (a GRPOConfig field: ``grpo``), or
    None. Sampling options are the trainer's in a training run, so ``grpo`` comes first."""
    from ..config import option_help
    from .grpo_fields import grpo_fields

    if key in grpo_fields() or key in TRAINER_OWNED:
        return "grpo"
    if key in option_help():
        return "rollout"
    if key in LORA_DEFAULTS:
        return "lora"
    return None


def save_config(cfg: TrainConfig, path: Path) -> None:
    """Write the resolved config; ``trl-env train --config PATH`` runs the same again (secrets
    in URLs masked: those come again with their flags)."""
    data = cfg.to_dict()
    data["rollout"] = {k: _plain(v) for k, v in data["rollout"].items()}
    data = redact(data)
    text = "# The resolved configuration of this run: `trl-env train --config` takes it.\n"
    path.write_text(text + yaml.safe_dump(data, sort_keys=False), encoding="utf-8")


def _plain(value: Any) -> Any:
    """Enum members (``Isolation.THREAD``) as their text, which YAML's safe dumper writes."""
    return value.value if isinstance(value, enum.Enum) else value


def read_saved(path: Path) -> dict[str, Any] | None:
    """A run directory's saved config, or None when it has none."""
    return load_config(path) if path.is_file() else None


def demo_config() -> dict[str, Any]:
    """The README's demo: a run on the tiny model that visibly learns within minutes on CPU."""
    text = (resources.files("trl_env.training") / "demo.yaml").read_text(encoding="utf-8")
    return dict(yaml.safe_load(text))

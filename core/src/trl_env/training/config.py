"""Training configuration: defaults < config file < command line, validated in one place."""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from ..errors import UsageError

ROLLOUT_KEYS = ("max_turns", "max_new_tokens", "max_episode_tokens", "step_timeout", "error_reward")
SAMPLING_KEYS = ("temperature", "top_p", "top_k")  # shared with GRPOConfig, which scales logits too

# trl-env's defaults for GRPOConfig; any GRPOConfig field can override them.
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


@dataclass
class TrainConfig:
    """Everything ``trl-env train`` needs; the YAML config file has the same keys."""

    env: str = ""
    processor: str = ""
    model: str = "tiny"
    env_args: dict[str, Any] = field(default_factory=dict)
    processor_args: dict[str, Any] = field(default_factory=dict)
    output_dir: str = ""
    train_seeds: int = 2048  # dataset rows: the env's first N training seeds
    rollout: dict[str, Any] = field(default_factory=dict)
    grpo: dict[str, Any] = field(default_factory=dict)
    lora: dict[str, Any] | None = None  # r, alpha, dropout, target_modules
    resume: bool = False
    check: bool = True

    def merged(self, overrides: dict[str, Any]) -> TrainConfig:
        """A copy with ``overrides`` applied; dict fields are merged key by key."""
        data = dataclasses.asdict(self)
        for key, value in overrides.items():
            if value is None:
                continue
            if isinstance(data.get(key), dict) and isinstance(value, dict):
                data[key] = {**data[key], **value}
            else:
                data[key] = value
        return TrainConfig(**data)

    def validate(self) -> TrainConfig:
        if not self.env or not self.processor:
            raise UsageError("Name an environment and a processor: --env NAME --processor NAME.")
        unknown = set(self.rollout) - set(ROLLOUT_KEYS)
        if unknown:
            raise UsageError(
                f"Unknown rollout option {sorted(unknown)[0]!r}; known: {', '.join(ROLLOUT_KEYS)}."
            )
        _check_grpo_keys(self.grpo)
        if self.train_seeds < 1:
            raise UsageError("train_seeds must be at least 1.")
        if not self.output_dir:
            self.output_dir = str(Path("runs") / f"{self.env}-{self.processor}")
        return self

    def grpo_args(self) -> dict[str, Any]:
        return {**GRPO_DEFAULTS, **self.grpo}


def _check_grpo_keys(grpo: dict[str, Any]) -> None:
    from trl import GRPOConfig

    known = {f.name for f in dataclasses.fields(GRPOConfig)}
    for key in grpo:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise UsageError(f"{key!r} is not a GRPOConfig option.{hint}")


def load_config(path: str | Path) -> dict[str, Any]:
    """Read a YAML config file into TrainConfig keys."""
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise UsageError(f"Cannot read config file {path}: {exc.strerror}.") from exc
    except yaml.YAMLError as exc:
        raise UsageError(f"Config file {path} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise UsageError(f"Config file {path} must hold a mapping of options.")
    known = {f.name for f in dataclasses.fields(TrainConfig)}
    for key in data:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise UsageError(f"Unknown key {key!r} in {path}.{hint}")
    return data


def demo_config() -> dict[str, Any]:
    """The README's demo: a run on the tiny model that visibly learns within minutes on CPU."""
    text = (resources.files("trl_env.training") / "demo.yaml").read_text(encoding="utf-8")
    return dict(yaml.safe_load(text))

"""``trl-env train``: GRPO on a registered environment with trl-env's rollout function.

Exports load lazily: the CLI imports :mod:`.config` for its ``--help`` without the trainer.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TrainConfig", "load_config", "train"]


def __getattr__(name: str) -> Any:
    if name in ("TrainConfig", "load_config"):
        from . import config

        return getattr(config, name)
    if name == "train":
        from .run import train

        return train
    raise AttributeError(name)

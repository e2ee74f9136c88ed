"""``trl-env train`` (GRPO on a registered environment with trl-env's rollout function) and
``trl-env sft`` (a warm-up on an env's demonstrations), as library functions: ``train``,
``run_sft``.

Exports load lazily: the CLI imports :mod:`.config` for its ``--help`` without the trainer.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TrainConfig", "end_process_group", "load_config", "run_sft", "train"]


def __getattr__(name: str) -> Any:
    if name in ("TrainConfig", "load_config"):
        from . import config

        return getattr(config, name)
    if name in ("train", "end_process_group"):
        from . import run

        return getattr(run, name)
    if name == "run_sft":
        from .sft_run import run_sft

        return run_sft
    raise AttributeError(name)

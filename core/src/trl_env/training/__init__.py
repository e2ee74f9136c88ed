"""``trl-env train``: GRPO on a registered environment with trl-env's rollout function."""

from .config import TrainConfig, load_config
from .run import train

__all__ = ["TrainConfig", "load_config", "train"]

"""Ways over from elsewhere, each in a module of its own:

- :mod:`~trl_env.compat.v01`: trl-env 0.1.x envs and six-string processors, unchanged
  (:func:`v01_env`, :func:`v01_processor`);
- :mod:`~trl_env.compat.for_trl`: a trl-env env as the class TRL's
  ``GRPOTrainer(environment_factory=...)`` takes (:func:`environment_factory`);
- :mod:`~trl_env.compat.from_trl`: a TRL ``environment_factory`` class as a trl-env env
  (:func:`from_environment_factory`).

docs/migrating.md shows each with a worked example.
"""

from __future__ import annotations

from .for_trl import EnvironmentForTrl, environment_factory
from .from_trl import TrlClassEnv, from_environment_factory
from .v01 import V01Env, V01Processor, v01_env, v01_processor

__all__ = [
    "EnvironmentForTrl",
    "TrlClassEnv",
    "V01Env",
    "V01Processor",
    "environment_factory",
    "from_environment_factory",
    "v01_env",
    "v01_processor",
]

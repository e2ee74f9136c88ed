"""Generation backends: the rollout engine talks to models through :class:`Backend`."""

from .base import Backend, Sample, SamplingParams, Session

__all__ = ["Backend", "Sample", "SamplingParams", "Session"]

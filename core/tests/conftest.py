"""Shared fixtures: fake distributions, isolated in-process registrations, sample plugin code."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from trl_env import registry
from trl_env.testing.fake_dist import (
    COUNT_ENV,
    FakeDistribution,
    FakeDistributions,
    fake_distribution,
)

__all__ = ["fake_distribution"]  # re-exported so pytest sees the fixture here

# A processor: plain "role: text" lines; the action is the reply's last line.
LINE_PROCESSOR = """
class LineProcessor:
    stop_tokens = ("<end>",)

    def __init__(self, tokenizer=None, prefix=""):
        self.tokenizer = tokenizer
        self.prefix = prefix

    def init_system_input(self, prompt):
        return f"{self.prefix}system: {prompt}\\n"

    def append_user_input(self, prompt):
        return f"user: {prompt}\\nagent: "

    def parse_agent_output(self, completion):
        *reasoning, action = completion.split("<end>")[0].split("\\n")
        return "\\n".join(reasoning), action.strip()
"""


@pytest.fixture(autouse=True)
def _isolated_registrations() -> Iterator[None]:
    """In-process registrations made by a test do not leak into the next one."""
    saved = {reg: dict(reg._local) for reg in (registry.envs, registry.processors)}
    yield
    for reg, local in saved.items():
        reg._local.clear()
        reg._local.update(local)


@pytest.fixture
def env_dist(fake_distribution: FakeDistributions) -> Callable[..., FakeDistribution]:
    """``env_dist(dist, env_name, source=COUNT_ENV, attr="CountEnv")``: one env in one dist."""

    def make(
        dist: str,
        env_name: str,
        *,
        source: str = COUNT_ENV,
        attr: str = "CountEnv",
        version: str = "1.0",
    ) -> FakeDistribution:
        module = "fake_" + dist.replace("-", "_")
        return fake_distribution(
            dist, version, envs={env_name: f"{module}:{attr}"}, modules={module: source}
        )

    return make


@pytest.fixture
def processor_dist(fake_distribution: FakeDistributions) -> Callable[..., FakeDistribution]:
    """``processor_dist(dist, name)``: :data:`LINE_PROCESSOR` registered as ``name``."""

    def make(dist: str, name: str, *, version: str = "1.0") -> FakeDistribution:
        module = "fake_" + dist.replace("-", "_")
        return fake_distribution(
            dist,
            version,
            processors={name: f"{module}:LineProcessor"},
            modules={module: LINE_PROCESSOR},
        )

    return make

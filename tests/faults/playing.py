"""The fault tests' one way to play a batch (the tiny model, greedy, short turns), and one way
to leave a worker process behind its parent."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from trl_env import batch_rollout
from trl_env.episode import Episode


def play_tiny(
    stack: Any, env: Any, seeds: list[str], isolation: str, **options: Any
) -> list[Episode]:
    """``batch_rollout`` of ``seeds`` on ``stack``'s tiny model; ``options`` (the processor
    included) override the defaults."""
    settings = {
        "processor": stack.processor,
        "max_new_tokens": 3,
        "max_episode_tokens": 512,
        "temperature": 0.0,
        "env_isolation": isolation,
        **options,
    }
    return batch_rollout(seeds, env=env, tokenizer=stack.tokenizer, model=stack.model, **settings)


def parent_of_a_busy_worker(
    folder: Path, module: Any, env: str, seed: str
) -> tuple[subprocess.Popen[str], int]:
    """A Python process whose pool's worker plays ``module.env`` (reset with ``seed``) and is
    inside a ``step`` that never returns; the parent, and the worker's pid."""
    script = folder / "orphan.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(Path(module.__file__).parent)!r})\n"
        f"import {module.__name__.rpartition('.')[2]} as envs\n"
        "from trl_env.hosts.pool import EnvProcessPool\n"
        f"pool = EnvProcessPool(envs.{env})\n"
        "remote = pool.open(timeout=30)\n"
        f"remote.call('reset', {seed!r}, timeout=30)\n"
        "print(__import__('psutil').Process().children()[0].pid, flush=True)\n"
        "remote.call('step', 'x', timeout=None)\n"
    )
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    return parent, int(parent.stdout.readline())

"""TRL's moving parts (``trl_env.trl_compat``): the layout of TRL 1.18+ and the supported range.

TRL 1.18 removed the submodules of ``trl.experimental.async_grpo`` (its release notes). That
release cannot be installed here, so its layout is simulated: a subprocess makes every one of
those submodules unimportable before trl-env loads, then runs ``EnvRolloutWorker`` against the
vLLM stand-in server. Its samples must be the episodes as played, and the trainer's own reading
of the buffer (TRL's queue dataset, batcher and collator, from the installed TRL) must accept
them.
"""

from __future__ import annotations

import dataclasses
import inspect
import pickle
import queue
import subprocess
import sys
from collections import defaultdict

import pytest

from trl_env import trl_compat
from trl_env.async_worker import group_advantages
from trl_env.errors import UsageError
from trl_env.testing.async_consumer import expected_targets, samples_of, trained_targets

G = 4

# Run in a fresh interpreter: TRL 1.18's layout, then groups of the worker, pickled to argv[2].
_LAYOUT_118 = r"""
import importlib.abc, pickle, sys

GONE = "trl.experimental.async_grpo."

class Gone(importlib.abc.MetaPathFinder):
    # TRL 1.18: the experimental package keeps only its re-exports; every submodule is gone
    def find_spec(self, name, path=None, target=None):
        if name.startswith(GONE):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Gone())

from trl_env.async_worker import EnvRolloutWorker
from trl_env.resolve import resolve_stack
from trl_env import trl_compat

try:
    import trl.experimental.async_grpo.async_rollout_worker  # noqa: F401
    raise SystemExit("the simulated layout still imports async_rollout_worker")
except ModuleNotFoundError:
    pass

stack = resolve_stack("qwen3", {}, "tiny")
records = []
worker = EnvRolloutWorker(
    env="guess", processor="qwen3", tokenizer=stack.tokenizer, vllm_server_base_url=sys.argv[1],
    num_generations=4, max_inflight_episodes=8, model=stack.model_path, max_new_tokens=6,
    on_episodes=records.extend, vllm_server_timeout=60,
)
worker.start()
try:
    samples = [worker.rollout_buffer.get(timeout=300) for _ in range(12)]
finally:
    worker.stop()
loaded = sorted(m for m in sys.modules if m.startswith(GONE))
played = [
    (e.prompt_ids, e.completion_ids, e.env_mask, e.logprobs, e.seed, e.reward) for e in records
]
with open(sys.argv[2], "wb") as out:
    pickle.dump({"samples": samples, "played": played, "loaded": loaded,
                 "cls": trl_compat.sample_class().__module__}, out)
"""


@pytest.mark.slow
def test_the_worker_streams_exact_samples_with_trl_118s_layout(qwen3, stand_in_server, tmp_path):
    out = tmp_path / "samples.pkl"
    done = subprocess.run(
        [sys.executable, "-c", _LAYOUT_118, stand_in_server.url, str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = pickle.loads(out.read_bytes())
    assert got["loaded"] == []  # no submodule of the old layout was imported
    assert got["cls"] == "trl_env.trl_compat"  # samples built by trl-env's own dataclass
    samples = got["samples"]
    assert len(samples) == 3 * G

    by_ids = {tuple(p + c): (p, m, lp, seed, r) for p, c, m, lp, seed, r in got["played"]}
    groups = defaultdict(list)
    for s in samples:
        prompt, mask, logprobs, seed, reward = by_ids[tuple(s.input_ids.tolist())]
        n = len(prompt)
        assert s.completion_mask.tolist() == [0] * n + mask
        played = [lp if m else 0.0 for lp, m in zip(logprobs, mask, strict=True)]
        assert s.old_log_probs.tolist() == pytest.approx([0.0] * n + played, abs=1e-6)
        assert s.model_version == 0
        groups[s.group_id].append((seed, reward, s.advantage))
    for members in groups.values():
        assert len({seed for seed, _, _ in members}) == 1  # one seed a group
        if len(members) == G:
            advantages = group_advantages([r for _, r, _ in members])
            assert [a for _, _, a in members] == pytest.approx(advantages)

    # the installed TRL's trainer reads these samples as it reads its own
    loop = trl_compat.async_grpo_module()
    from accelerate import PartialState

    PartialState()
    buffer: queue.Queue = queue.Queue()
    for s in samples:
        buffer.put(s)
    dataset = loop.RolloutQueueDataset(
        buffer,
        model_version_fn=lambda: 0,
        check_health_fn=lambda _: None,
        stale_after_s=600,
        metrics=defaultdict(list),
        max_staleness=3,
        poll_interval_s=1.0,
    )
    batches = loop.FixedCountBatcher(dataset, num_processes=1, microbatch_size=2 * G)
    collate = loop.DataCollatorForRollout(pad_token_id=qwen3.tokenizer.pad_token_id)
    rows = next(iter(batches))
    # the loss inputs: every trained target is a sampled id with its logprob
    expected = expected_targets(samples_of(rows))
    assert trained_targets(collate([rows])) == expected
    assert sum(expected.values()) > 0


def test_the_async_names_come_from_trl_first_then_the_experimental_package(monkeypatch):
    import trl

    stable_config, stable_trainer = trl_compat.async_grpo()
    from trl.experimental.async_grpo import AsyncGRPOConfig, AsyncGRPOTrainer

    assert (stable_config, stable_trainer) == (AsyncGRPOConfig, AsyncGRPOTrainer)

    # TRL 1.18+: both are exported by trl itself, and that home wins
    class Config:
        pass

    class Trainer:
        def __init__(self, model, args=None, rollout_worker=None):
            pass

    monkeypatch.setattr(trl, "AsyncGRPOConfig", Config, raising=False)
    monkeypatch.setattr(trl, "AsyncGRPOTrainer", Trainer, raising=False)
    assert trl_compat.async_grpo() == (Config, Trainer)

    # a trainer that no longer takes a rollout worker is said in one sentence
    class Closed:
        def __init__(self, model, args=None):
            pass

    monkeypatch.setattr(trl, "AsyncGRPOTrainer", Closed)
    with pytest.raises(UsageError, match="takes no rollout_worker") as refused:
        trl_compat.async_grpo()
    assert "\n" not in str(refused.value)


def test_a_missing_dependency_of_trls_module_is_named(monkeypatch):
    """TRL 1.14-1.15's async package imports aiohttp (TRL's vllm extra): say that, not that the
    trainer is missing; the worker's samples fall back to trl-env's own class meanwhile."""
    real = trl_compat.importlib.import_module

    def without_aiohttp(name, *args):
        if name.startswith("trl.experimental.async_grpo"):
            raise ModuleNotFoundError("No module named 'aiohttp'", name="aiohttp")
        return real(name, *args)

    monkeypatch.setattr(trl_compat.importlib, "import_module", without_aiohttp)
    with pytest.raises(UsageError, match=r"needs aiohttp, which is not installed") as refused:
        trl_compat.async_grpo()
    assert "\n" not in str(refused.value)
    trl_compat.sample_class.cache_clear()
    try:
        assert trl_compat.sample_class() is trl_compat.RolloutSample
    finally:
        trl_compat.sample_class.cache_clear()


def test_the_fallback_sample_has_trls_fields():
    """Where TRL's RolloutSample exists, trl-env's stand-in has exactly its fields."""
    from trl.experimental.async_grpo.async_rollout_worker import RolloutSample

    theirs = [(f.name, f.default) for f in dataclasses.fields(RolloutSample)]
    ours = [(f.name, f.default) for f in dataclasses.fields(trl_compat.RolloutSample)]
    assert ours == theirs
    assert trl_compat.sample_class() is RolloutSample  # TRL's own class where it imports


@pytest.mark.parametrize(
    ("version", "inside"),
    [
        ("1.13.0", False),
        ("1.14.0", True),
        ("1.15.0", False),  # its GRPO step needs Triton: failed make compat on CPU
        ("1.16.0", True),
        ("1.19.2", True),
        ("1.20.0rc1", False),
        ("2.0.0", False),
        ("0.29.1", False),
    ],
)
def test_the_range_is_said_in_one_sentence(version, inside):
    problem = trl_compat.trl_problem(version)
    assert (problem is None) == inside
    if problem:
        assert version in problem and "\n" not in problem
        assert problem.count(". ") == 0  # one sentence


def test_the_installed_trl_is_in_range():
    """The range the core's pyproject declares is the one the code enforces."""
    import re
    from pathlib import Path

    pyproject = Path(inspect.getfile(trl_compat)).parents[2] / "pyproject.toml"
    declared = re.findall(r'"(trl[<>=!].*?)"', pyproject.read_text(encoding="utf-8"))
    assert declared == [trl_compat.REQUIREMENT]
    assert trl_compat.trl_problem(trl_compat.installed_trl()) is None


def test_train_with_an_unsupported_trl_says_so_in_one_line(tmp_path):
    """A fake trl 1.99 (metadata only) ahead of the real one on the path: one sentence, exit 2."""
    fake = tmp_path / "site"
    info = fake / "trl-1.99.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: trl\nVersion: 1.99.0\n")
    code = "import sys; sys.path.insert(0, sys.argv.pop(1)); from trl_env.cli import main; main()"
    done = subprocess.run(
        [sys.executable, "-c", code, str(fake), "train", "--env", "guess", "--processor", "qwen3"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "TRL 1.99.0 is installed" in done.stderr
    assert done.stderr.strip().count("\n") == 0

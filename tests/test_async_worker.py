"""``EnvRolloutWorker`` read the way TRL's ``AsyncGRPOTrainer`` reads it.

The consumer is TRL's own code: ``RolloutQueueDataset`` (staleness filter, health checks),
``FixedCountBatcher`` and ``DataCollatorForRollout`` (the packed loss inputs). The trainer itself
needs CUDA and FlashAttention kernels, so only its reading of the buffer runs here. Generation is
a vLLM-protocol server on 127.0.0.1: the stand-in on the tiny model, which also dies on demand.
"""

from __future__ import annotations

import itertools
import math
import threading
from collections import defaultdict

import pytest

from trl_env.async_worker import EnvRolloutWorker, group_advantages
from trl_env.testing.async_consumer import expected_targets, samples_of, trained_targets
from trl_env.testing.timeouts import scaled
from trl_env.testing.vllm_server import running
from trl_env.trl_compat import async_grpo_module

pytestmark = pytest.mark.slow

G = 4  # episodes per group


def _worker(stack, url, records, **kw):
    options = dict(
        env="guess",
        processor="qwen3",
        tokenizer=stack.tokenizer,
        vllm_server_base_url=url,
        num_generations=G,
        max_inflight_episodes=2 * G,
        model=stack.path,
        max_new_tokens=6,
        on_episodes=records.extend,
        vllm_server_timeout=60,
    )
    options.update(kw)
    return EnvRolloutWorker(**options)


def _consumer(worker, max_staleness=3):
    from accelerate import PartialState

    RolloutQueueDataset = async_grpo_module().RolloutQueueDataset  # where this TRL keeps it
    PartialState()  # the trainer's own state, which TRL's logging needs

    metrics = defaultdict(list)
    dataset = RolloutQueueDataset(
        worker.rollout_buffer,
        model_version_fn=lambda: worker.model_version,
        check_health_fn=worker.check_health,
        stale_after_s=600,
        metrics=metrics,
        max_staleness=max_staleness,
        poll_interval_s=1.0,
    )
    return dataset, metrics


def _our_threads():
    names = ("trl-env-group", "trl-env-rollout-worker", "vllm-request")
    return [t for t in threading.enumerate() if t.name.startswith(names)]


def test_samples_are_the_episodes_as_played_and_groups_whole(qwen3, stand_in_server):
    loop = async_grpo_module()
    DataCollatorForRollout, FixedCountBatcher = loop.DataCollatorForRollout, loop.FixedCountBatcher
    records = []
    worker = _worker(qwen3, stand_in_server.url, records)
    worker.start()
    try:
        dataset, _ = _consumer(worker)
        batches = FixedCountBatcher(dataset, num_processes=1, microbatch_size=3 * G)
        collate = DataCollatorForRollout(pad_token_id=qwen3.tokenizer.pad_token_id)
        consumed = []
        for rows in itertools.islice(batches, 2):
            consumed += samples_of(rows)
            # the loss inputs: every trained target is a sampled id with its logprob
            expected = expected_targets(samples_of(rows))
            assert trained_targets(collate([rows])) == expected
    finally:
        worker.stop()
    assert not _our_threads()
    assert len(consumed) == 6 * G

    by_ids = {tuple(ep.prompt_ids + ep.completion_ids): ep for ep in records}
    groups = defaultdict(list)
    for sample in consumed:
        ep = by_ids[tuple(sample["input_ids"].tolist())]
        n = len(ep.prompt_ids)
        assert sample["completion_mask"].tolist() == [0] * n + ep.env_mask
        played = [lp if m else 0.0 for lp, m in zip(ep.logprobs, ep.env_mask, strict=True)]
        assert sample["old_log_probs"].tolist() == pytest.approx([0.0] * n + played, abs=1e-6)
        groups[sample["group_id"]].append((ep, sample["advantage"]))
    for members in groups.values():
        assert len({ep.seed for ep, _ in members}) == 1  # one seed a group
    # the groups the consumer read whole carry TRL's group-normalised advantages
    whole = [m for m in groups.values() if len(m) == G]
    assert whole
    for members in whole:
        rewards = [ep.reward for ep, _ in members]
        assert [a for _, a in members] == pytest.approx(group_advantages(rewards))


def test_versions_are_stamped_at_dispatch_and_stale_samples_dropped(qwen3, stand_in_server):
    records = []
    worker = _worker(qwen3, stand_in_server.url, records)
    worker.start()
    try:
        raw = [worker.rollout_buffer.get(timeout=300) for _ in range(G)]
        dispatched_before = worker.groups_dispatched
        worker.update_model_version(1)
        dispatched_after = worker.groups_dispatched
        # TRL's consumer, strict: a sample one version old is dropped
        dataset, metrics = _consumer(worker, max_staleness=0)
        passed = []
        for sample in dataset:
            passed.append(sample)
            if sample["group_id"] >= dispatched_after:
                break
    finally:
        worker.stop()
    assert all(s.model_version == 0 for s in raw)
    # groups dispatched before the update carry version 0, so TRL drops them all
    assert all(s["group_id"] >= dispatched_before for s in passed)
    assert sum(metrics["sample/dropped_stale_total"]) >= 1
    assert worker.model_version == 1


def test_failing_envs_and_a_dead_server_lose_no_group_silently(qwen3, scripted_env):
    from functools import partial

    records = []
    env = partial(scripted_env, turns=2, fault="raise", fault_turn=1)
    with running(qwen3.path, "--die-after", str(3 * G)) as server:
        worker = _worker(qwen3, server.url, records, env=env, prompts=["1", "2", "3"])
        worker.start()
        try:
            with pytest.raises(RuntimeError, match="queued no group"):
                for _ in range(200):
                    # every group fails (no sample): the heartbeat is the start's; the server
                    # dies at the fourth group, within a few seconds of back-off
                    worker.check_health(stale_after_s=scaled(8))
                    threading.Event().wait(0.5)
        finally:
            worker.stop()
    assert not _our_threads()
    metrics = []
    while not worker.metrics_queue.empty():
        metrics.append(worker.metrics_queue.get_nowait())
    # every group that ended is accounted for: its samples and the episodes left out
    assert len(metrics) == worker.groups_queued
    for m in metrics:
        assert m["async/samples_per_group"] + m["async/episodes_left_out"] == G
    assert any(m["rollout/status_error"] > 0 for m in metrics)
    errors = [ep for ep in records if ep.error]
    assert any("step exploded" in ep.error for ep in errors)  # the env's own failure
    assert any("generation failed" in ep.error for ep in errors)  # the server went away
    assert all(not math.isnan(ep.reward) for ep in records)


def test_train_async_without_cuda_says_so_in_one_sentence_and_leaves_no_run(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    trl_env = str(Path(sys.executable).parent / "trl-env")
    out = tmp_path / "run"
    command = [trl_env, "train", "--env", "guess", "--processor", "qwen3", "--async"]
    done = subprocess.run(
        [*command, "--output-dir", str(out)], capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 2
    assert "needs a CUDA GPU" in done.stderr and done.stderr.strip().count("\n") == 0
    assert not out.exists()


def test_async_config_refuses_an_option_the_async_trainer_lacks():
    from trl_env.errors import UsageError
    from trl_env.training.async_run import async_config, check_can_run

    with pytest.raises(UsageError, match="--vllm-server-base-url"):
        check_can_run({}, cuda=True)
    with pytest.raises(UsageError, match="no option 'vllm_gpu_memory_utilization'"):
        async_config("out", {"vllm_gpu_memory_utilization": 0.5})
    options = {"num_generations": 4, "use_vllm": True, "max_staleness": 2}
    args = async_config("out", {**options, "use_cpu": True, "bf16": False})
    assert (args.num_generations, args.max_staleness) == (4, 2)


def test_the_worker_plays_a_run_s_player_with_its_hosts(qwen3):
    """``trl-env train --async`` hands the worker the Player whose hosts played the run's
    start-up checks: no processor of its own, and no host opened again."""
    from trl_env.config import RolloutConfig
    from trl_env.player import Player

    player = Player("guess", "qwen3", RolloutConfig(env_isolation="process", env_workers=1))
    host = player.hosts["guess"]
    worker = EnvRolloutWorker(
        env=player, tokenizer=qwen3.tokenizer, vllm_server_base_url="http://127.0.0.1:9",
        train_seeds=2,
    )  # fmt: skip
    assert worker.rollout.player is player and player.hosts == {"guess": host}
    assert worker.prompts == ["guess/train-0", "guess/train-1"]  # drawn on its host
    worker.stop()  # never started: it lets go of the player's hosts
    assert host.pool.live_workers == 0 and player.hosts == {}

"""``EnvRolloutWorker``: trl-env episodes for TRL's experimental ``AsyncGRPOTrainer``.

TRL's async trainer takes its samples from a *rollout worker* (``RolloutWorkerProtocol``): an
object with a ``rollout_buffer`` queue of ``RolloutSample``s, a ``metrics_queue``, and
``start``/``stop``/``update_model_version``/``check_health``. This worker fills the buffer with
episodes played by the trl-env engine against a vLLM server, so the ids, masks and logprobs the
trainer learns from are the ones sampled, never re-rendered.

Groups, not batches: up to ``max_inflight_episodes // num_generations`` groups are played at once,
each on its own thread, each ``num_generations`` episodes of one seed of one env. A group that
ends is scored and queued at once and the next one starts: nothing waits for the slowest group.
Each group's samples carry the policy version current when it was dispatched.
"""

from __future__ import annotations

import itertools
import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from multiprocessing.queues import Queue as MPQueue
from types import SimpleNamespace
from typing import Any

from .config import Credit, RolloutConfig
from .episode import Episode
from .errors import UsageError
from .protocols import Processor, Tokenizer
from .trl_integration import episode_columns, make_rollout_func, trl_columns

__all__ = ["EnvRolloutWorker", "group_advantages"]

log = logging.getLogger("trl_env")

METRICS_QUEUE_SIZE = 4096  # TRL's worker bounds its metrics queue the same way: drop when full


def group_advantages(rewards: Sequence[float]) -> list[float]:
    """``(r - mean) / (std + 1e-8)`` over a group's scored rewards, as TRL's worker computes them
    (population std); an unscored (NaN) reward gets advantage 0."""
    scored = [r for r in rewards if not math.isnan(r)]
    if not scored:
        return [0.0] * len(rewards)
    mean = math.fsum(scored) / len(scored)
    std = math.sqrt(math.fsum((r - mean) ** 2 for r in scored) / len(scored))
    return [0.0 if math.isnan(r) else (r - mean) / (std + 1e-8) for r in rewards]


class EnvRolloutWorker:
    """TRL's ``RolloutWorkerProtocol`` over the trl-env engine and a vLLM server.

    ``env`` is what :func:`~trl_env.make_rollout_func` takes (a registered name, a factory, an
    :class:`~trl_env.EnvSpec`, a mixture, or a :class:`~trl_env.player.Player`, which brings
    its own ``processor``); ``prompts`` are its rows (seeds, or ``LABEL/SEED`` in a mixture),
    cycled in order; by default ``train_seeds`` rows drawn from the env's training seeds. The
    other keyword arguments are rollout options (:class:`~trl_env.RolloutConfig` fields).
    ``model`` (a path) gives the model's own end-of-sequence ids from its generation config.
    """

    def __init__(
        self,
        *,
        env: Any,
        processor: Processor | str | None = None,
        tokenizer: Tokenizer,
        vllm_server_base_url: str,
        num_generations: int = 8,
        max_inflight_episodes: int = 64,
        prompts: Sequence[str] | None = None,
        train_seeds: int = 256,
        seed: int = 0,
        model: str | None = None,
        processor_options: dict[str, Any] | None = None,
        queue_maxsize: int = 0,
        vllm_server_timeout: float | None = None,
        config: RolloutConfig | None = None,
        on_episodes: Callable[[list[Episode]], None] | None = None,
        **overrides: Any,
    ) -> None:
        if num_generations < 1:
            raise UsageError(f"num_generations must be at least 1, not {num_generations}.")
        if max_inflight_episodes < num_generations:
            raise UsageError(
                f"max_inflight_episodes ({max_inflight_episodes}) must hold at least one group "
                f"of num_generations ({num_generations}) episodes."
            )
        options: dict[str, Any] = {"vllm_server_base_url": vllm_server_base_url}
        if vllm_server_timeout is not None:
            options["vllm_server_timeout"] = vllm_server_timeout
        self._rollout = make_rollout_func(
            env=env,
            processor=processor,
            config=config,
            processor_options=processor_options,
            backend="vllm",
            backend_options=options,
            **overrides,
        )
        if self._rollout.credit is Credit.TURN:
            raise UsageError(
                "credit='turn' is not available with AsyncGRPOTrainer, whose samples carry one "
                "advantage each; use credit='episode', or GRPOTrainer without --async."
            )
        self.tokenizer = tokenizer
        self.num_generations = num_generations
        self.max_groups = max_inflight_episodes // num_generations
        if prompts is None:  # rows LABEL/SEED of the env's own training seeds, from its host
            prompts = self._rollout.player.train_rows(train_seeds, seed=seed)
        self.prompts = list(prompts)
        if not self.prompts:
            self._rollout.close()
            raise UsageError("The rollout worker has no prompts to play.")
        self.model = model
        self.on_episodes = on_episodes
        # typed as TRL's protocol declares them (either kind of queue)
        self.rollout_buffer: queue.Queue[Any] | MPQueue[Any] = queue.Queue(maxsize=queue_maxsize)
        self.metrics_queue: queue.Queue[Any] | MPQueue[Any] = queue.Queue(METRICS_QUEUE_SIZE)
        self._version = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._failure: BaseException | None = None
        self._heartbeat = time.time()
        self._failing = 0  # groups in a row that yielded no sample
        self.groups_dispatched = 0
        self.groups_queued = 0

    # -- RolloutWorkerProtocol -------------------------------------------------------------
    def start(self) -> None:
        """Connect to the server (one sentence if it is not there) and start playing."""
        if self._thread is not None:
            return
        # the tokenizer, the model's end ids, the wires and the backend (which checks the server)
        self._rollout.bind(self.tokenizer, _model_eos_ids(self.model))
        self._stop.clear()
        self._heartbeat = time.time()
        self._pool = ThreadPoolExecutor(self.max_groups, thread_name_prefix="trl-env-group")
        self._thread = threading.Thread(
            target=self._dispatch, name="trl-env-rollout-worker", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop dispatching, wait for the groups in flight, close env workers and sessions."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        self._rollout.close()

    def update_model_version(self, model_version: int) -> None:
        self._version = int(model_version)

    def check_health(self, stale_after_s: float) -> None:
        """Raise if dispatching failed, or no group ended within ``stale_after_s`` seconds."""
        if self._failure is not None:
            raise RuntimeError(
                f"The trl-env rollout worker failed: {type(self._failure).__name__}: "
                f"{self._failure}"
            ) from self._failure
        age = time.time() - self._heartbeat
        if age > stale_after_s:
            raise RuntimeError(
                f"The trl-env rollout worker has queued no group for {age:.0f} s "
                f"(more than {stale_after_s:.0f} s); is the vLLM server answering?"
            )

    @property
    def model_version(self) -> int:
        return self._version

    @property
    def rollout(self) -> Any:
        """The :class:`~trl_env.trl_integration.EnvRollout` this worker plays through (its
        curriculum ``progress`` is what a checkpoint saves)."""
        return self._rollout

    # -- playing groups --------------------------------------------------------------------
    def _dispatch(self) -> None:
        """Keep ``max_groups`` groups in flight until stopped."""
        assert self._pool is not None
        running: set[Future[None]] = set()
        prompts = itertools.cycle(self.prompts)
        try:
            while not self._stop.is_set():
                while len(running) < self.max_groups and not self._stop.is_set():
                    group_id = self.groups_dispatched
                    self.groups_dispatched += 1
                    prompt, version = next(prompts), self._version
                    running.add(self._pool.submit(self._play_group, prompt, group_id, version))
                done, running = wait(running, timeout=0.5, return_when=FIRST_COMPLETED)
                for future in done:
                    future.result()  # a failure here is the worker's own bug: check_health says
        except BaseException as exc:
            self._failure = exc
            log.error("the trl-env rollout worker stopped: %s", exc)
        finally:
            wait(running)

    def _play_group(self, prompt: str, group_id: int, version: int) -> None:
        start = time.monotonic()
        rows = [prompt] * self.num_generations
        episodes = self._rollout.play_rows(rows, training=True, step=version)
        if self.on_episodes is not None:
            self.on_episodes(episodes)
        out = trl_columns(episodes)
        samples = self._samples(out, episodes, group_id, version)
        for sample in samples:
            self._put(sample)
        self.groups_queued += 1
        if samples:  # the heartbeat says samples arrive, not that groups are tried
            self._heartbeat = time.time()
            self._failing = 0
        else:
            self._back_off()
        columns = episode_columns(episodes, self._rollout.labels, self._rollout.progress)
        metrics = {name: _mean(values) for name, values in columns.items()}
        metrics["async/group_seconds"] = time.monotonic() - start
        metrics["async/samples_per_group"] = float(len(samples))
        metrics["async/episodes_left_out"] = float(self.num_generations - len(samples))
        metrics["async/staleness_at_queue"] = float(self._version - version)
        try:
            self.metrics_queue.put_nowait(metrics)
        except queue.Full:  # the trainer stopped draining: drop, never block generation
            pass

    def _samples(
        self, out: dict[str, list[Any]], episodes: list[Episode], group_id: int, version: int
    ) -> list[Any]:
        """One ``RolloutSample`` per episode with a trained token (TRL's worker also leaves out
        rows with none: an episode masked whole, e.g. one that failed, teaches nothing)."""
        import numpy as np

        from .trl_compat import sample_class

        RolloutSample = sample_class()  # TRL's class where it is importable, else trl-env's

        # a failed episode left out of the gradient has no reward (None): it takes no part in
        # its group's mean and std, as TRL's worker treats an unscored completion
        rewards = [math.nan if r is None else float(r) for r in out["env_reward"]]
        advantages = group_advantages(rewards)
        samples = []
        now = time.time()
        for i, (prompt_ids, completion_ids, logprobs, mask) in enumerate(
            zip(
                out["prompt_ids"],
                out["completion_ids"],
                out["logprobs"],
                out["env_mask"],
                strict=True,
            )
        ):
            if not any(mask):
                if i < len(episodes) and episodes[i].error:
                    log.warning(
                        "group %d: episode %r left out (%s: %s)",
                        group_id,
                        episodes[i].seed,
                        episodes[i].status,
                        episodes[i].error,
                    )
                continue
            messages = episodes[i].messages if i < len(episodes) else []
            trained = [lp if m else 0.0 for lp, m in zip(logprobs, mask, strict=True)]
            samples.append(
                RolloutSample(
                    prompt=messages[:2],
                    completion=messages[2:],
                    input_ids=np.asarray([*prompt_ids, *completion_ids], dtype=np.int64),
                    completion_mask=np.asarray([0] * len(prompt_ids) + list(mask), dtype=np.int64),
                    old_log_probs=np.asarray([0.0] * len(prompt_ids) + trained, dtype=np.float32),
                    advantage=float(advantages[i]),
                    model_version=version,
                    group_id=group_id,
                    metrics={"reward": rewards[i], "env_turns": float(out["env_turns"][i])},
                    enqueued_at=now,
                )
            )
        return samples

    def _back_off(self) -> None:
        """A group that yielded nothing (a server down, an env failing every episode) waits
        before the next, 0.5 s doubling to 30 s, so a dead server is not asked in a hot loop."""
        self._failing += 1
        self._stop.wait(min(30.0, 0.5 * 2 ** min(self._failing - 1, 6)))

    def _put(self, sample: Any) -> None:
        while not self._stop.is_set():
            try:
                self.rollout_buffer.put(sample, timeout=0.5)
                return
            except queue.Full:
                continue

    def __iter__(self) -> Iterator[Any]:
        """The samples as they are queued (for a consumer other than TRL's trainer)."""
        while True:
            yield self.rollout_buffer.get()


def _model_eos_ids(path: str | None) -> list[int]:
    """The model's own end-of-sequence ids from its generation config (the server holds the
    weights); none for a model without one: the tokenizer's EOS is still a stop id."""
    if path is None:
        return []
    from transformers import GenerationConfig

    from .wire import model_eos_ids

    try:
        config = GenerationConfig.from_pretrained(path)
    except OSError:
        return []
    return list(model_eos_ids(SimpleNamespace(generation_config=config)))


def _mean(values: list[float]) -> float:
    return math.fsum(values) / len(values) if values else math.nan

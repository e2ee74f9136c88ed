"""Plug the rollout engine into TRL's ``GRPOTrainer(rollout_func=...)``.

TRL passes this process's slice of the generation batch with each dataset prompt already repeated
``num_generations`` times in a row; the prompt is the episode seed (in a mixture, ``LABEL/SEED``),
so the members of a group all start from the same state of the same env.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from .backends import build_backend
from .config import SAMPLING_FIELDS, Credit, RolloutConfig
from .curriculum import Progress
from .episode import STATUSES, Episode
from .errors import UsageError
from .mixture import Mixture
from .player import Player
from .protocols import Processor
from .rollout import EnvSource
from .spec import EnvSpec
from .wire import Wire, model_eos_ids

log = logging.getLogger("trl_env")

# Two notices a user of this module can do nothing about, shown before the first step of every
# run: TRL marks `rollout_func` (what trl-env is built on) experimental, and GRPOConfig passes a
# TrainingArguments field that transformers has renamed. Only these two messages are silenced.
warnings.filterwarnings("ignore", message="You are using 'rollout_func'", category=UserWarning)
warnings.filterwarnings(
    "ignore", message="`gradient_checkpointing` is deprecated", category=FutureWarning
)


def seed_of(prompt: Any) -> str:
    """The episode seed carried by a dataset prompt (a string, or chat messages ending in it)."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, Sequence) and prompt and isinstance(prompt[-1], dict):
        return str(prompt[-1].get("content", ""))
    return str(prompt)


EnvsArg = EnvSource | EnvSpec | Mixture | Mapping[str, float] | Sequence[str | EnvSpec] | Player


def make_rollout_func(
    *,
    env: EnvsArg,
    processor: Processor | str | None = None,
    config: RolloutConfig | None = None,
    processor_options: dict[str, Any] | None = None,
    backend: str = "transformers",
    backend_options: dict[str, Any] | None = None,
    on_episodes: Callable[[list[Episode]], None] | None = None,
    **overrides: Any,
) -> EnvRollout:
    """Return ``rollout_func(prompts, trainer)`` for ``GRPOTrainer``.

    The returned dict has TRL's keys (``prompt_ids``, ``completion_ids``, ``logprobs``,
    ``env_mask``) plus ``env_reward``, ``env_status``, ``env_turns``, ``env_name``,
    ``env_masked``, ``env_turn_starts`` and ``env_turn_rewards``, which TRL forwards to the
    reward functions (use :func:`env_reward`). With ``credit="turn"`` each model turn is
    credited with the rewards from that turn on, through
    :class:`~trl_env.training.credit.CreditGRPOTrainer` (docs/learning.md has the formula). An
    episode failed by the infrastructure is masked by default (all-zero ``env_mask``,
    ``env_reward`` None: see ``failed_episodes``). A seeded run (the rollout's ``seed``, else the
    trainer's ``GRPOConfig.seed``) draws a new stream per batch and replays as a whole (see
    docs/reproducibility.md). Sampling options not given here are
    the trainer's own (``temperature``, ``top_p``, ``top_k``, ``min_p``, ``repetition_penalty`` of
    its GRPOConfig), since TRL recomputes logprobs under them; given ones must agree with it.
    ``backend`` names a registered generation backend: by default the trainer's own model
    generates through transformers; ``"vllm"`` uses the trainer's vLLM (colocate) or the server at
    ``backend_options["vllm_server_base_url"]``.

    ``env`` is a registered name, an env factory, an :class:`~trl_env.EnvSpec`, or a mixture: a
    :class:`~trl_env.Mixture`, a ``{name: weight}`` mapping or a list of names and specs. In a
    mixture of several envs prompts are rows ``"LABEL/SEED"`` (see
    :meth:`Mixture.draw`), each env keeps its options, processor options, ``max_turns`` and
    curriculum, and metrics are logged per env too (``rollout/LABEL/env_reward``, ...). It may
    also be a :class:`~trl_env.player.Player` whose hosts a run opened for its start-up checks
    (``trl-env train``): it plays on with them, its own processor and options.
    """
    if isinstance(env, Player):
        base = replace(config or env.config, **overrides).validate()
        player = env
    else:
        if processor is None:
            raise UsageError("make_rollout_func needs processor= (a registered name, or one).")
        base = replace(config or RolloutConfig(), **overrides).validate()
        player = Player(env, processor, base, processor_options=processor_options)
    return EnvRollout(
        player,
        base,
        _given_sampling(config, overrides),
        backend=backend,
        backend_options=backend_options,
        on_episodes=on_episodes,
    )


class EnvRollout:
    """The rollout function of one training run (see :func:`make_rollout_func`): TRL's glue
    around a :class:`~trl_env.player.Player`, which owns the schedule (curricula, batch seeds).

    It binds the player to the trainer on its first call (tokenizer, the model's end ids,
    sampling from the trainer's GRPOConfig, the backend, the run's seed), reads the mode, step
    and rank of each batch off the trainer, fits the episodes to TRL's columns and logs the
    rollout metrics into the trainer's.
    """

    def __init__(
        self,
        player: Player,
        base: RolloutConfig,
        given: set[str],
        *,
        backend: str = "transformers",
        backend_options: dict[str, Any] | None = None,
        on_episodes: Callable[[list[Episode]], None] | None = None,
    ) -> None:
        self.player = player
        self.base, self.given = base, given
        self.backend_name, self.backend_options = backend, dict(backend_options or {})
        self.on_episodes = on_episodes

    @property
    def progress(self) -> Progress:
        return self.player.progress

    @property
    def credit(self) -> Credit:
        """Which tokens an outcome is credited to; a trainer reads it (``credit`` of
        :class:`~trl_env.training.credit.CreditGRPOTrainer`)."""
        return self.base.credit

    @property
    def labels(self) -> list[str]:
        return self.player.labels

    @property
    def hosts(self) -> dict[str, Any]:
        """The env hosts kept for the run, one per env label."""
        return self.player.hosts

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        if self.player.backend is None:
            self._bind(trainer)
        _wait_for_weights(trainer)
        episodes = self.play_rows(
            [seed_of(p) for p in prompts],
            training=_training(trainer),
            step=_step(trainer),
            rank=getattr(getattr(trainer, "accelerator", None), "process_index", 0),
            gather=lambda items: _gather_objects(trainer, items),
        )
        _log_metrics(trainer, episodes, self.labels, self.progress)
        _report_errors(episodes)
        if self.on_episodes is not None:
            self.on_episodes(episodes)
        return trl_columns(episodes)

    def play_rows(
        self,
        rows: list[str],
        *,
        training: bool,
        step: int,
        rank: int = 0,
        gather: Callable[[list[Any]], list[Any]] | None = None,
    ) -> list[Episode]:
        """One batch of rows on the player's schedule (:meth:`Player.play_rows`), each episode
        fit for TRL; no trainer needed once bound."""
        episodes = self.player.play_rows(
            rows, training=training, step=step, rank=rank, gather=gather
        )
        for ep in episodes:
            _fit_for_trl(ep, self.player.wires[ep.env])
        return episodes

    def evaluation_ended(self) -> None:
        """The next evaluation starts again from its first batch's stream."""
        self.player.evaluation_ended()

    def _bind(self, trainer: Any) -> None:
        """What the first call learns from the trainer: tokenizer, wires, sampling, backend."""
        if self.credit is Credit.TURN and not getattr(trainer, "credits_turns", False):
            raise UsageError(
                f"credit='turn' needs a trainer that takes an advantage per token, and "
                f"{type(trainer).__name__} gives every token of an episode the same one: use "
                "trl_env.training.credit.CreditGRPOTrainer in place of GRPOTrainer."
            )
        tokenizer = getattr(trainer, "processing_class", None)
        tokenizer = getattr(tokenizer, "tokenizer", tokenizer)  # a processor wrapping one
        if tokenizer is None:
            raise UsageError(
                "The trainer has no processing_class (tokenizer) to encode episodes with."
            )
        eos = model_eos_ids(_unwrap(trainer, getattr(trainer, "model", None)))
        trainer_seed = getattr(getattr(trainer, "args", None), "seed", None)
        config = _trainer_sampling(trainer, self.base, self.given)
        for wire in self.bind(tokenizer, eos, trainer, config, trainer_seed):
            _register_stop_ids(trainer, wire)
        if callable(getattr(trainer, "add_callback", None)):
            trainer.add_callback(_evaluation_ends(self))

    def bind(
        self,
        tokenizer: Any,
        eos_ids: Sequence[int],
        trainer: Any = None,
        config: RolloutConfig | None = None,
        trainer_seed: Any = None,
    ) -> list[Wire]:
        """Bind the player: the tokenizer, the model's end ids, the backend (built with
        ``trainer`` when there is one: a colocated vLLM, say) and the run's seed (the
        rollout's own, else the trainer's GRPOConfig.seed); the distinct wires."""
        if self.base.seed is not None:
            self.player.run_seed = self.base.seed
        elif isinstance(trainer_seed, int):
            self.player.run_seed = trainer_seed
        _warn_truncation(config or self.base)
        backend = build_backend(
            self.backend_name, tokenizer=tokenizer, trainer=trainer, options=self.backend_options
        )
        return self.player.bind(tokenizer, eos_ids, backend, config or self.base)

    def close(self) -> None:
        """Stop the env worker processes (also done at exit)."""
        self.player.close()


_SAID: set[str] = set()  # warnings already given in this process


def _warn_truncation(config: RolloutConfig) -> None:
    """Say once per process that truncated sampling biases this TRL's objective."""
    from .trl_compat import installed_trl, truncation_bias

    sentence = truncation_bias(installed_trl(), {k: getattr(config, k) for k in SAMPLING_FIELDS})
    if sentence and sentence not in _SAID:
        _SAID.add(sentence)
        log.warning(sentence)


def trl_columns(episodes: Sequence[Episode]) -> dict[str, list[Any]]:
    """A batch as TRL's ``rollout_func`` returns it: its token columns, and the ``env_*``
    columns TRL forwards to the reward functions."""
    return {
        "prompt_ids": [ep.prompt_ids for ep in episodes],
        "completion_ids": [ep.completion_ids for ep in episodes],
        "logprobs": [ep.logprobs for ep in episodes],
        # A masked failure has no token to train on and no reward: TRL leaves a completion
        # every reward function scores None out of its group's mean and std, with advantage 0.
        "env_mask": [[0] * len(ep.env_mask) if ep.masked else ep.env_mask for ep in episodes],
        "env_reward": [None if ep.masked else ep.reward for ep in episodes],
        "env_status": [str(ep.status) for ep in episodes],
        "env_turns": [ep.turns for ep in episodes],
        "env_name": [ep.env for ep in episodes],
        "env_masked": [ep.masked for ep in episodes],
        # which tokens are whose turn, and (credit per turn) what each turn earned
        "env_turn_starts": [ep.turn_starts for ep in episodes],
        "env_turn_rewards": [ep.turn_rewards for ep in episodes],
    }


def _evaluation_ends(rollout: EnvRollout) -> Any:
    """A ``TrainerCallback`` that tells ``rollout`` each time an evaluation has ended."""
    from transformers import TrainerCallback

    class EvaluationEnds(TrainerCallback):
        def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            rollout.evaluation_ended()

    return EvaluationEnds()


def _training(trainer: Any) -> bool:
    model = getattr(trainer, "model", None)
    return bool(getattr(model, "training", True))


def _step(trainer: Any) -> int:
    state = getattr(trainer, "state", None)
    return int(getattr(state, "global_step", 0) or 0)


def _wait_for_weights(trainer: Any) -> None:
    """In vLLM server mode TRL's main process pushes the new weights to the server just before
    calling the rollout; every process then generates there on its own, so none may start
    before the push ends (TRL's own server mode gathers all prompts on the main process: the
    same barrier)."""
    args, accelerator = getattr(trainer, "args", None), getattr(trainer, "accelerator", None)
    if (
        accelerator is not None
        and getattr(args, "use_vllm", False)
        and getattr(args, "vllm_mode", "") == "server"
        and getattr(accelerator, "num_processes", 1) > 1
    ):
        accelerator.wait_for_everyone()


def _gather_objects(trainer: Any, items: list[Any]) -> list[Any]:
    """``items`` of every process (each rank plays its own slice of the batch)."""
    accelerator = getattr(trainer, "accelerator", None)
    if accelerator is None or getattr(accelerator, "num_processes", 1) == 1:
        return items
    from accelerate.utils import gather_object

    return list(gather_object(items))


def _given_sampling(config: RolloutConfig | None, overrides: dict[str, Any]) -> set[str]:
    """Sampling options the caller set, in ``overrides`` or as non-defaults of ``config``."""
    given = {k for k in SAMPLING_FIELDS if k in overrides}
    if config is not None:
        default = RolloutConfig()
        given |= {k for k in SAMPLING_FIELDS if getattr(config, k) != getattr(default, k)}
    return given


def sampling_of(args: Any) -> dict[str, Any]:
    """The sampling options of a trainer's GRPOConfig, in RolloutConfig's terms."""
    out: dict[str, Any] = {}
    for name in SAMPLING_FIELDS:
        value = getattr(args, name, None)
        if value is None:  # GRPOConfig's None means "off"
            continue
        out[name] = value
    return out


def _trainer_sampling(trainer: Any, base: RolloutConfig, given: set[str]) -> RolloutConfig:
    """``base`` with the trainer's sampling options; refuses a given one that disagrees."""
    theirs = sampling_of(getattr(trainer, "args", None))
    for name in sorted(given & set(theirs)):
        ours = getattr(base, name)
        if ours != theirs[name]:
            raise UsageError(
                f"make_rollout_func got {name}={ours!r} but the trainer's GRPOConfig has "
                f"{name}={theirs[name]!r}; TRL scores the episodes under its own setting, so "
                "set it in one place (GRPOConfig)."
            )
    return replace(base, **theirs).validate()


def _unwrap(trainer: Any, model: Any) -> Any:
    accelerator = getattr(trainer, "accelerator", None)
    if accelerator is None or model is None:
        return model
    return accelerator.unwrap_model(model)


def _fit_for_trl(ep: Episode, wire: Wire) -> None:
    """TRL reads ``completion_ids[-1]`` and pads prompts: give an episode that never reached
    the model one masked closer (its prompt was cut to leave room for it, see the budget rule)."""
    close = list(wire.close_ids)
    if not ep.completion_ids:
        ep.completion_ids, ep.env_mask, ep.logprobs = close, [0] * len(close), [0.0] * len(close)
    if not ep.prompt_ids:  # the env failed before its first prompt existed
        ep.prompt_ids = list(close)


def env_reward(
    completions: list[Any], env_reward: list[float | None] | None = None, **_: Any
) -> list[float | None]:
    """Reward function for ``GRPOTrainer``: the environment's reward at the end of each episode.

    None for an episode left out of training (an infrastructure failure, ``failed_episodes``
    ``mask``): TRL keeps it out of its group's baseline. Other reward functions should return
    None for it too (``env_status`` and ``env_masked`` say which it is).
    """
    if env_reward is None:
        raise ValueError("env_reward needs the rollout function from trl_env.make_rollout_func")
    return [None if r is None else float(r) for r in env_reward]


def _register_stop_ids(trainer: Any, wire: Wire) -> None:
    """Let TRL count episodes that end on a stop id (the processor's or the model's) as
    terminated, not clipped."""
    ids = getattr(trainer, "eos_token_ids", None)
    if not isinstance(ids, list):
        return
    for token_id in sorted(wire.stop_ids):
        if token_id not in ids:
            ids.append(token_id)


# Metrics also broken down per env (``rollout/LABEL/NAME``) in a mixed run.
PER_ENV = ("env_reward", "turns", "success", "sampled_tokens", "inserted_tokens")


def episode_metrics(episodes: Sequence[Episode]) -> dict[str, list[float]]:
    """Per-episode values of the rollout metrics (averaged by the caller; NaN: not known)."""
    values: dict[str, list[float]] = {
        "rollout/turns": [float(e.turns) for e in episodes],
        # masked failures are not scored: the mean is over the episodes trained on
        "rollout/env_reward": [math.nan if e.masked else e.reward for e in episodes],
        "rollout/masked_episodes": [float(e.masked) for e in episodes],
        "rollout/special_token_strings": [float(e.special_token_strings) for e in episodes],
        "rollout/success": [math.nan if e.success is None else float(e.success) for e in episodes],
        "rollout/sampled_tokens": [float(e.sampled_tokens) for e in episodes],
        "rollout/inserted_tokens": [float(e.inserted_tokens) for e in episodes],
        "rollout/bridge_mismatches": [float(e.bridge_mismatches) for e in episodes],
        "rollout/noncanonical_turns": [float(e.noncanonical_turns) for e in episodes],
        "rollout/env_seconds": [e.env_seconds for e in episodes],
        "rollout/sanitized_chars": [float(e.sanitized_chars) for e in episodes],
        "rollout/capped_chars": [float(e.capped_chars) for e in episodes],
    }
    for status in STATUSES:
        values[f"rollout/status_{status}"] = [float(e.status == status) for e in episodes]
    return values


def episode_columns(
    episodes: Sequence[Episode], labels: Sequence[str], progress: Progress | None = None
) -> dict[str, list[float]]:
    """The known per-episode values of the rollout metrics (NaN ones left out): over all
    episodes, and per env when there are several envs or a curriculum (``rollout/LABEL/...``,
    with each curriculum's stage once)."""
    values = episode_metrics(episodes)
    out = {name: [v for v in column if not math.isnan(v)] for name, column in values.items()}
    if len(labels) > 1 or progress:
        per_env = [*PER_ENV, *(f"status_{s}" for s in STATUSES)]
        for label in labels:
            mine = [e.env == label for e in episodes]
            for name in per_env:
                column = values[f"rollout/{name}"]
                out[f"rollout/{label}/{name}"] = [
                    v for v, keep in zip(column, mine, strict=True) if keep and not math.isnan(v)
                ]
            stage = progress.stage(label) if progress else None
            if stage is not None:
                out[f"rollout/{label}/stage"] = [float(stage)]
    return {name: column for name, column in out.items() if column}


def _log_metrics(
    trainer: Any, episodes: list[Episode], labels: Sequence[str], progress: Progress
) -> None:
    metrics = getattr(trainer, "_metrics", None)
    if metrics is None:
        return
    mode = "train" if _training(trainer) else "eval"
    # Each process plays its slice of the batch; the means are over all of them.
    everyone = _gather_objects(trainer, [_light(e) for e in episodes])
    # Each episode's value goes in, not the batch's mean: TRL averages all a logging window (or
    # an evaluation's batches) gathered, which is then the per-episode mean that eval, view and
    # summary.json show (trl_env.report.summary); a mean of batch means would weigh a batch
    # with few of an env's episodes as much as one with many.
    for name, values in episode_columns(everyone, labels, progress).items():
        metrics[mode][name].extend(values)


def _light(ep: Episode) -> Episode:
    """A copy without the text and token arrays (the counts stay), for gathering."""
    mask = [0] * ep.inserted_tokens + [1] * ep.sampled_tokens
    return replace(
        ep,
        prompt_ids=[],
        completion_ids=[],
        logprobs=[],
        env_mask=mask,
        text="",
        messages=[],
        segments=[],
    )


def _report_errors(episodes: list[Episode], limit: int = 3) -> None:
    failed = [e for e in episodes if e.status.failed]
    for ep in failed[:limit]:
        log.warning("episode %r ended with %s: %s", ep.seed, ep.status, ep.error)
    if len(failed) > limit:
        log.warning("%d more episodes failed in this batch", len(failed) - limit)

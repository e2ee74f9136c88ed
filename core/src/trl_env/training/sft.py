"""A supervised warm-up on an env's demonstrations: what ``trl-env sft`` runs.

Demonstration episodes are played by the rollout engine itself (:func:`trl_env.rollout.
batch_rollout`), with a backend whose "model" writes the env's ``demonstrate`` actions: the env
replies for real, and every id is the one a rollout of those actions holds (the same wire, the
same first prompt, env replies and turn closers). TRL's ``SFTTrainer`` then trains on each
episode's ids with the loss on the model's own tokens only (``assistant_masks``: the episode's
``env_mask``, the prompt and env text masked), and the model is saved to ``DIR/final``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..backends.base import RowHistories, Sample, SamplingParams, Turn
from ..config import RolloutConfig
from ..episode import Episode, Status
from ..errors import UsageError
from ..hosts import EnvHost, open_host
from ..spec import EnvSpec
from ..wire import Wire, encode_after
from .config import lora_config

if TYPE_CHECKING:
    from ..player import Player

# How many ids of context the demonstrated action is tokenized after (a word-start marker that
# SentencePiece tokenizers add to text alone is not added after the generation header).
_CONTEXT_IDS = 8


@dataclass
class Demonstrations:
    """The episodes rendered from an env's demonstrations, and those left out (with why)."""

    episodes: list[Episode]
    left_out: Counter[str] = field(default_factory=Counter)

    def rows(self) -> list[dict[str, list[int]]]:
        """One pre-tokenized SFT example per episode: its ids, and 1 on the model's own."""
        return [
            {
                "input_ids": ep.prompt_ids + ep.completion_ids,
                "assistant_masks": [0] * len(ep.prompt_ids) + list(ep.env_mask),
            }
            for ep in self.episodes
        ]

    @property
    def trained_tokens(self) -> int:
        return sum(sum(ep.env_mask) for ep in self.episodes)


def read_demonstrations(player: Player, spec: EnvSpec, seeds: Sequence[str]) -> list[list[str]]:
    """``demonstrate(seed)`` of each seed, read from one env on the run's host of ``spec``
    (:meth:`Player.demonstrations`: a solver that raises, hangs or crashes is one sentence); an
    env without the extra, or a missing or empty demonstration, is one sentence too."""
    label = spec.label
    found = player.demonstrations(spec, seeds)
    if found is None:
        raise UsageError(
            f"{label} has no demonstrate(seed) extra, so there is nothing to train on "
            "(`trl-env list --env NAME` says which envs demonstrate)."
        )
    for seed, actions in zip(seeds, found, strict=True):
        if actions is None:
            # A library env demonstrates some of its games or tasks only (TextArena); an env
            # made by a function may have no such extra at all.
            raise UsageError(
                f"{label} gives no demonstration for seed {seed!r} with these options, so "
                "there is nothing to train on (see its README for what it demonstrates)."
            )
        if not actions:
            raise UsageError(f"{label}.demonstrate({seed!r}) returned no actions.")
    return [list(a) for a in found if a is not None]


class _ScriptSession(RowHistories):
    """A generation session whose rows write their episode's demonstrated actions, one a turn:
    each as the tokenizer reads it after the generation header, then the turn's closer.

    An action is text the model is to write: a control token's string in it (``<|im_start|>``)
    is tokenized as that text, never as the control token, as env text is. An action longer than
    a turn's tokens can spell is cut to that many characters before it is tokenized (a 5 MB
    action would otherwise cost the tokenizer's pieces and offsets of all of it)."""

    def __init__(self, wire: Wire, scripts: Sequence[Sequence[str]], cut: Counter[int]) -> None:
        super().__init__()
        self.wire, self.scripts, self.cut = wire, scripts, cut
        self.turn: Counter[int] = Counter()
        # No token spells more characters than its vocabulary entry has (a byte-level entry
        # holds one character per byte; a byte-fallback "<0xE2>" more than its byte).
        vocab = wire.tokenizer.get_vocab()
        self.chars_per_token = max(map(len, vocab), default=1) or 1

    def _ids(self, before: str, action: str) -> list[int]:
        if self.wire.count_special(action):
            return self.wire.encode_literal(action, before)
        return encode_after(self.wire.tokenizer, before, action)

    def generate(self, turns: Sequence[Turn], stop_ids: frozenset[int]) -> list[Sample]:
        out = []
        for turn in turns:
            history = self.take(turn)
            script, n = self.scripts[turn.row], self.turn[turn.row]
            if n >= len(script):
                out.append(Sample(error=f"the demonstration ended after {n} actions, the env not"))
                continue
            before = self.wire.decode(history[-_CONTEXT_IDS:])
            fits = turn.max_new_tokens * self.chars_per_token
            action = script[n][:fits]
            ids = self._ids(before, action) + list(self.wire.close_ids)
            if len(ids) > turn.max_new_tokens or len(script[n]) > fits:
                self.cut[turn.row] += 1  # as a model cut at its token limit would be
                ids = ids[: turn.max_new_tokens]
            history.extend(ids)
            self.turn[turn.row] += 1
            out.append(Sample(ids=ids, logprobs=[0.0] * len(ids), stopped=True))
        return out


@dataclass
class _ScriptBackend:
    wire: Wire
    scripts: Sequence[Sequence[str]]
    cut: Counter[int] = field(default_factory=Counter)

    def session(self, params: SamplingParams) -> _ScriptSession:
        return _ScriptSession(self.wire, self.scripts, self.cut)


def render_demonstrations(
    env: EnvHost | EnvSpec | str | Callable[..., Any],
    seeds: Sequence[str],
    scripts: Sequence[Sequence[str]],
    wire: Wire,
    config: RolloutConfig,
    options: Mapping[str, Any] | None = None,
) -> Demonstrations:
    """Play each seed's demonstrated actions through the engine, its envs made with
    ``options`` on ``env``'s host (the run's; a name, spec or factory gets one of its own for
    these episodes); keep the episodes that end as the demonstration says (the env ended it,
    every action read back as demonstrated, not cut by a token limit, and won where the env
    says), the others counted by why."""
    from ..rollout import EnvBinding, play

    backend = _ScriptBackend(wire, scripts)
    config = replace(config, max_turns=max(config.max_turns or 0, *(len(s) for s in scripts)))
    host = env if isinstance(env, EnvHost) else open_host(EnvSpec.of(env), config)
    if options is None and not isinstance(env, EnvHost):
        options = EnvSpec.of(env).options_at()
    binding = EnvBinding(host, wire, config, options=dict(options or {}))
    try:
        played = play([(binding, seed) for seed in seeds], backend)
    finally:
        if host is not env:
            host.close()
    kept, left_out = [], Counter[str]()
    for row, (ep, script) in enumerate(zip(played, scripts, strict=True)):
        said = [m["content"] for m in ep.messages if m["role"] == "assistant"]
        if backend.cut[row]:
            left_out["an action longer than max_new_tokens"] += 1
        elif ep.status is Status.BUDGET:
            left_out["longer than max_episode_tokens"] += 1
        elif ep.status is not Status.DONE:
            left_out[f"ended {ep.status.value}: {ep.error}" if ep.error else ep.status.value] += 1
        elif said != list(script):
            raise UsageError(
                f"The processor reads the demonstrated action {_first_diff(script, said)} of "
                f"seed {ep.seed!r}; a demonstration must read back as written."
            )
        elif ep.success is False:
            left_out["the demonstration did not win"] += 1
        else:
            kept.append(ep)
    return Demonstrations(kept, left_out)


def _first_diff(script: Sequence[str], said: Sequence[str]) -> str:
    for wrote, read in zip(script, said, strict=False):
        if wrote != read:
            return f"{wrote!r} as {read!r}"
    return f"list of {len(script)} as {len(said)} actions"


@dataclass(frozen=True)
class SftSettings:
    """What the SFT run trains with (``trl-env sft``'s options)."""

    epochs: float = 3.0
    learning_rate: float = 5e-5
    batch_size: int = 8
    seed: int = 0
    lora: dict[str, Any] | None = None  # training.config.lora_config's options; None: whole model
    report_to: tuple[str, ...] = ()  # transformers' integrations: tensorboard (DIR/runs), wandb


def make_trainer(
    rows: list[dict[str, list[int]]],
    model: Any,
    tokenizer: Any,
    out: Path,
    settings: SftSettings,
    callbacks: Sequence[Any] = (),
) -> Any:
    """TRL's ``SFTTrainer`` over ``rows`` (pre-tokenized: its labels are the ids where
    ``assistant_masks`` is 1, -100 elsewhere), without transformers' own progress printing."""
    import datasets
    import torch
    from transformers import PrinterCallback, ProgressCallback
    from trl import SFTConfig, SFTTrainer

    datasets.disable_progress_bars()
    cuda = torch.cuda.is_available()
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    args = SFTConfig(
        output_dir=str(out),
        num_train_epochs=settings.epochs,
        learning_rate=settings.learning_rate,
        per_device_train_batch_size=settings.batch_size,
        seed=settings.seed,
        logging_steps=1,
        save_strategy="no",
        report_to=list(settings.report_to) or "none",
        max_length=None,  # the episodes fit the episode budget they were played with
        use_cpu=not cuda,
        # TRL turns checkpointing on by default; on a CPU it only recomputes each forward, and
        # it stays on in the model: an RL run on the warmed-up model object paid for it too.
        gradient_checkpointing=cuda,
        disable_tqdm=True,
    )
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=datasets.Dataset.from_list(rows),
        processing_class=tokenizer,
        peft_config=lora_config(settings.lora),
        callbacks=list(callbacks),
    )
    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    return trainer


def train_sft(trainer: Any, out: Path) -> dict[str, Any]:
    """Train with ``trainer`` (:func:`make_trainer`); save its model (a LoRA adapter merged into
    it) with its tokenizer to ``out/final``. Returns the trainer's figures."""
    result = trainer.train()
    final = out / "final"
    trained = trainer.model
    weights = sum(p.numel() for p in trained.parameters() if p.requires_grad)
    merge = getattr(trained, "merge_and_unload", None)  # a peft model: LoRA
    if callable(merge):
        trained = merge()  # `--model DIR/final` is a whole model
    trained.save_pretrained(str(final))
    trainer.processing_class.save_pretrained(str(final))
    losses = [log["loss"] for log in trainer.state.log_history if "loss" in log]
    return {
        "steps": trainer.state.global_step,
        "trained_parameters": weights,  # the adapter's alone with LoRA
        "first_loss": losses[0] if losses else None,
        "last_loss": losses[-1] if losses else None,
        "train_seconds": round(float(result.metrics.get("train_runtime", 0.0)), 2),
    }


def write_episodes(folder: Path, episodes: Sequence[Episode]) -> None:
    """The demonstration episodes as a training run logs its own (``trl-env view`` shows them)."""
    folder.mkdir(parents=True, exist_ok=True)
    heavy = ("prompt_ids", "completion_ids", "logprobs", "env_mask")
    with (folder / "rank0.jsonl").open("w", encoding="utf-8") as f:
        for ep in episodes:
            rec = {"step": 0, "split": "train"}
            rec.update((k, v) for k, v in ep.to_dict().items() if k not in heavy)
            f.write(json.dumps(rec) + "\n")


def progress_callback(mode: str) -> Any:
    """The bar of ``train`` with the latest loss (``bar``), or a line a logged step (``lines``,
    ``lines-stderr``)."""
    from .. import streams
    from .callbacks import LineProgress, RichProgress

    class LossBar(RichProgress):
        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            if self.bar is not None and logs and "loss" in logs:
                self.info = f"loss {logs['loss']:.4f}"
                self._show()

    class LossLines(LineProgress):
        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            if not (state.is_world_process_zero and logs and "loss" in logs):
                return
            left = self.pace.clock_left(state.max_steps - state.global_step)
            print(
                f"step {state.global_step}/{state.max_steps}  loss {logs['loss']:.4f}  {left} left",
                file=self.stream or streams.out(),
                flush=True,
            )

    if mode == "bar":
        return LossBar()
    return LossLines(streams.err() if mode == "lines-stderr" else None)

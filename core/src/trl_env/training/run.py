"""Build a GRPOTrainer from resolved options and run it, stopping cleanly on a signal."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from .. import streams
from ..errors import OutputError, UsageError
from ..player import Player
from ..redact import redact
from ..resolve import resolve_stack
from . import checkpoints, rundir
from .config import (
    TrainConfig,
    canonical_envs,
    defaults,
    envs_label,
    lora_config,
    merge,
    read_saved,
    resolve,
    save_config,
)

SUMMARY_WINDOW = 10


@dataclass
class Outcome:
    """How a run ended: its summary, and the signal that stopped it early, if one did."""

    summary: dict[str, Any]
    signal_name: str = ""
    exit_code: int = 0
    note: str = ""  # why nothing was trained (a --resume of a run that has trained to its end)


def _is_main() -> bool:
    # Before GRPOConfig there is no process group to ask; the launcher's variable says.
    return os.environ.get("RANK", "0") == "0"


def train(
    given: dict[str, Any] | TrainConfig,
    *,
    resume: bool = False,
    overwrite: bool = False,
    progress: str = "bar",
    hold_signals: bool = False,
) -> Outcome:
    """Train; ``given`` holds the explicit options (a sparse layer) or a resolved config.

    ``progress``: "bar" (a terminal), "lines" (one line per logged step on stdout),
    "lines-stderr", or "none". Except with "none", the run first says what it loads and prepares,
    and during and after its first step what a step takes (:class:`~.callbacks.FirstStep`).
    The summary is also written to ``output_dir/summary.json``.
    ``hold_signals``: once a signal has stopped the run, leave its handler in place on return
    (a process that exits next, the CLI: a second Ctrl-C while it closes still names the
    checkpoint); otherwise the caller's handlers come back.
    """
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    layer = given.to_dict() if isinstance(given, TrainConfig) else dict(given)
    # Absolute from the start: an env (thread isolation) may os.chdir, and relative paths would
    # follow it (checkpoints, episode logs and TensorBoard files written elsewhere, or nowhere).
    out = Path(layer.get("output_dir") or _default_out(layer)).absolute()
    layer["output_dir"] = str(out)
    if _is_main():
        rundir.check(out, resume=resume, overwrite=overwrite)
    saved = read_saved(out / rundir.CONFIG_FILE) if resume else None
    say = _speaker(progress) if _is_main() else None
    began = time.perf_counter()
    if say is not None:  # before resolve (it imports TRL) and the loading: seconds to minutes
        preview = merge(saved or defaults(layer.get("model") or "tiny"), layer)
        first = _preparing(preview, out, resume)
        if first:
            say(first)
    cfg = resolve(layer, saved)
    if resume:  # transformers would train one more step past max_steps, and save final/ again
        note = rundir.finished(out, int(cfg.grpo.get("max_steps") or 0))
        if note is not None:
            return Outcome(rundir.saved_summary(out) or {}, note=note)
    if _is_main():
        rundir.ensure_writable(out)
    resume_from = _pick_checkpoint(out) if resume else None

    import torch
    from datasets import Dataset
    from transformers.trainer_callback import PrinterCallback, ProgressCallback
    from trl import GRPOConfig

    from ..models import load_model
    from ..plugins import manager
    from ..trl_integration import env_reward, make_rollout_func
    from .callbacks import CurriculumState, FirstStep, LineProgress, RichProgress, StopOnSignal
    from .credit import CreditGRPOTrainer

    start = time.perf_counter()
    mixture = cfg.mixture()
    stack = resolve_stack(cfg.processor, cfg.processor_args, cfg.model, check=cfg.check)
    # No PartialState() before GRPOConfig: the first one fixes the process group for good, and
    # only GRPOConfig knows to ask for a CPU one.
    grpo = _grpo_args(cfg, int(os.environ.get("WORLD_SIZE", "1")), torch.cuda.is_available())
    if cfg.asynchronous:  # before anything slow: it needs CUDA and a vLLM server
        from . import async_run

        server_url = async_run.check_can_run(grpo, torch.cuda.is_available())
    rollout = cfg.rollout_config()
    # One host per env for the whole run: the start-up checks and every batch open envs there.
    player = Player(mixture, cfg.processor, rollout, processor_options=cfg.processor_args)
    try:
        _check_envs(cfg, player, stack)
        rows = player.train_rows(cfg.train_seeds, seed=int(grpo.get("seed", 0)))
        held_out = player.held_out_rows(cfg.eval_seeds) if cfg.eval_every else None
    except BaseException:
        player.close()
        raise
    if grpo.get("logging_dir"):  # TensorBoard's folder, absolute for the same reason
        grpo["logging_dir"] = os.path.abspath(grpo["logging_dir"])
    if cfg.asynchronous:
        args = async_run.async_config(str(out), grpo)
    else:
        try:
            args = GRPOConfig(output_dir=str(out), **grpo)
        except (ValueError, TypeError) as exc:  # GRPOConfig's own cross-option checks
            raise UsageError(f"GRPOConfig refused these options: {exc}") from exc
    from accelerate import PartialState

    state = PartialState()
    if state.is_main_process:
        if overwrite:
            rundir.clear(out)
        rundir.claim(out, "train")  # first: what --overwrite may replace later
        save_config(cfg, out / rundir.CONFIG_FILE)
    state.wait_for_everyone()

    episode_log = EpisodeLog(out / "episodes", args.process_index)
    if resume_from is not None:  # the steps after the checkpoint are played again
        episode_log.trim(checkpoints.step_of(resume_from))
    first_step = FirstStep(say, episode_log.training, began)

    def on_episodes(episodes: list[Any]) -> None:
        episode_log(episodes)
        first_step.played(episodes)

    # What is played, the same in both modes; they differ in who generates and when.
    playing: dict[str, Any] = {"env": player, "config": rollout, "on_episodes": on_episodes}
    if cfg.asynchronous:
        trainer, worker = async_run.build_trainer(
            args=args,
            model_path=stack.model_path,
            tokenizer=stack.tokenizer,
            rows=rows,
            url=server_url,
            **playing,
        )
        rollout_func = worker.rollout
    else:
        rollout_func = make_rollout_func(
            backend=cfg.backend, backend_options=_backend_options(cfg, args), **playing
        )
    if resume_from is not None:  # the curricula continue where the checkpoint left them
        saved_progress = CurriculumState.saved(resume_from)
        if saved_progress is not None:
            rollout_func.progress.restore(saved_progress)
    if not cfg.asynchronous:
        # GRPOTrainer itself with credit="episode"; one advantage per token with "turn"
        trainer_cls = checkpoints.atomic_trainer(CreditGRPOTrainer)
        trainer = trainer_cls(
            model=load_model(stack.model_path),
            args=args,
            train_dataset=Dataset.from_dict({"prompt": rows}),
            eval_dataset=Dataset.from_dict({"prompt": held_out}) if held_out else None,
            processing_class=stack.tokenizer,
            reward_funcs=[cast(Any, env_reward)],  # TRL's hint wants list[float | None]
            rollout_func=rollout_func,
            peft_config=lora_config(cfg.lora),
        )
    trainer.add_callback(CurriculumState(rollout_func.progress))
    episode_log.trainer = trainer
    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    if progress == "bar":
        bar = RichProgress()
        trainer.add_callback(bar)
        first_step.say = bar.say  # above the bar, which would otherwise draw over the lines
    elif progress.startswith("lines"):
        trainer.add_callback(LineProgress(streams.err() if progress == "lines-stderr" else None))
    trainer.add_callback(first_step)
    stopper = StopOnSignal(out)
    trainer.add_callback(stopper)
    main = trainer.is_world_process_zero()
    if main:
        manager().train_begin(redact(cfg.to_dict()))  # hooks log it: no secret in a URL
    try:  # signals are caught until the final files are written
        trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
        signum = stopper.received
        if signum is None:
            trainer.save_model(str(out / "final"))
        summary = _summary(trainer, cfg, time.perf_counter() - start, resume_from)
        if signum is not None:
            summary["stopped_by"] = signal.Signals(signum).name
            summary["checkpoint"] = str(checkpoints.path(out, trainer.state.global_step))
            summary["model_dir"] = ""
            summary["next_command"] = rundir.next_command(out)
        if main:
            summary = redact(summary)
            rundir.write_summary(out, summary)
            manager().train_end(summary)
    except Exception as exc:  # a full disk (records, checkpoints, logs): one sentence
        full = OutputError.disk_full(f"the run in {out}", exc)
        if full is None:
            raise
        raise full from None
    finally:
        if not (hold_signals and stopper.received is not None):
            stopper.restore()
        rollout_func.close()
        end_process_group()
    if signum is None:
        return Outcome(summary)
    return Outcome(summary, signal.Signals(signum).name, 128 + signum)


def end_process_group() -> None:
    """End torch.distributed's process group of a multi-process run, before the interpreter exits.

    Left to exit-time destructors, gloo's threads once ended a finished rank with "terminate
    called without an active exception" (SIGABRT). Ended right after the last collective, a rank
    once hung: gloo's worker thread frees that collective's tensors under the GIL, while the
    group's destructor (run when the trainer was freed) held the GIL and joined that thread.
    The pause lets the workers finish first.
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        time.sleep(0.2)  # releases the GIL to gloo's workers
        dist.destroy_process_group()


def _speaker(progress: str) -> Any:
    """Where a run's first lines go: with the progress, on stdout or stderr; None for "none"."""
    if progress == "none":
        return None
    stream = streams.err if progress == "lines-stderr" else streams.out

    def say(text: str) -> None:
        print(text, file=stream(), flush=True)

    return say


def _preparing(data: dict[str, Any], out: Path, resume: bool) -> str:
    """The run's first line, from its options as given (before they are resolved, which takes
    TRL's import): what it loads and prepares, and the work ahead. Empty for a resumed run that
    has nothing left to train (its note says so)."""
    grpo, rollout = data.get("grpo") or {}, data.get("rollout") or {}
    steps = grpo.get("max_steps")
    if not isinstance(steps, int) or steps < 1:  # refused next: announce no work
        return ""
    if resume and rundir.finished(out, steps) is not None:
        return ""
    env = data.get("env") or envs_label(canonical_envs(data.get("envs") or [], "options"))
    episodes = grpo.get("per_device_train_batch_size")
    if isinstance(episodes, int):
        episodes *= grpo.get("gradient_accumulation_steps") or 1
        episodes *= int(os.environ.get("WORLD_SIZE", "1"))
    turns = f"up to {rollout['max_turns']} turns" if rollout.get("max_turns") else "turns"
    return (
        f"Loading the model {data.get('model') or 'tiny'} ({data.get('processor')}) and "
        f"preparing {env}; then {steps} GRPO steps of {episodes} episodes ({turns} of at most "
        f"{rollout.get('max_new_tokens')} new tokens)."
    )


def _default_out(layer: dict[str, Any]) -> str:
    if layer.get("envs"):
        layer = {**layer, "env": envs_label(canonical_envs(layer["envs"], "options"))}
    if not layer.get("env") or not layer.get("processor"):
        raise UsageError("Name an environment and a processor: --env NAME --processor NAME.")
    return str(Path("runs") / f"{layer['env']}-{layer['processor']}")


def _pick_checkpoint(out: Path) -> Path:
    chosen, warnings = checkpoints.pick(out, rundir.restart_command(out))
    if _is_main():
        for warning in warnings:
            print(f"warning: {warning}", file=sys.stderr, flush=True)
    return chosen


def _grpo_args(cfg: TrainConfig, processes: int, cuda: bool) -> dict[str, Any]:
    grpo = cfg.grpo_args()
    if not cuda:  # bf16 and checkpointing only slow a CPU run down
        grpo.setdefault("bf16", False)
        grpo.setdefault("gradient_checkpointing", False)
        grpo.setdefault("use_cpu", True)
    batch = grpo["per_device_train_batch_size"] * (grpo.get("steps_per_generation") or 1)
    batch *= processes
    groups = grpo["num_generations"]
    if batch % groups:
        raise UsageError(
            f"The generation batch ({batch} = batch size x steps_per_generation x {processes} "
            f"process(es)) is not a multiple of num_generations ({groups}); "
            f"change --batch-size or --num-generations."
        )
    if grpo.get("use_vllm"):
        if importlib.util.find_spec("vllm") is None:  # TRL's engine needs it in both modes
            raise UsageError(
                "--use-vllm (or --backend vllm) trains with TRL's vLLM engine, and vllm is not "
                "installed here; install it with `pip install trl[vllm]` on a GPU machine."
            )
        # vLLM generates one turn per call; trl-env cuts it at the end of turn and budget.
        grpo["max_completion_length"] = cfg.rollout["max_new_tokens"]
    grpo.setdefault("max_completion_length", cfg.rollout["max_episode_tokens"])
    if cfg.eval_every:  # held-out seeds through TRL's own evaluation loop
        grpo.setdefault("eval_strategy", "steps")
        grpo.setdefault("eval_steps", cfg.eval_every)
        grpo.setdefault("per_device_eval_batch_size", grpo["per_device_train_batch_size"])
    return grpo


def _backend_options(cfg: TrainConfig, args: Any) -> dict[str, Any]:
    """The backend's own options: in vLLM server mode, the server TRL itself talks to."""
    if cfg.backend != "vllm" or args.vllm_mode != "server":
        return {}
    url = args.vllm_server_base_url or f"http://{args.vllm_server_host}:{args.vllm_server_port}"
    return {"vllm_server_base_url": url}


def _check_envs(cfg: TrainConfig, player: Player, stack: Any) -> None:
    """Before anything slow: each env's first prompt, rendered by its own processor (the run's,
    with the env's processor options), fits the budget at every curriculum stage, and that
    processor fits the model's tokenizer. The envs play on the run's own hosts."""
    from ..mixture import env_wires
    from ..startup import processor_fits

    budget = player.config.max_episode_tokens
    # the budget rule is the wire's room; each env's wire renders with its own processor options
    wires = env_wires(player.mixture, cfg.processor, stack.tokenizer, (), cfg.processor_args)
    for entry in player.mixture:
        wire = wires[entry.label]
        stages = entry.curriculum.stages if entry.curriculum else ({},)
        for n, options in enumerate(stages):
            text = player.first_prompt(entry, wire.processor, options)
            tokens = len(wire.encode([text])[0])
            room = wire.room(tokens, budget)
            if room < 1:
                at = f" at curriculum stage {n} ({options})" if entry.curriculum else ""
                raise UsageError(
                    f"The first prompt of {entry.label}{at} has {tokens} tokens but the episode "
                    f"budget (max_episode_tokens) is {budget}; raise it above {budget - room}."
                )
        if entry.processor_options and cfg.check:
            processor_fits(wire.processor, stack.tokenizer, f"{cfg.processor} of {entry.label}")


# The token-level arrays of an episode: large, and only the trainer needs them.
_HEAVY_FIELDS = ("prompt_ids", "completion_ids", "logprobs", "env_mask")


class EpisodeLog:
    """Appends each rank's episodes to ``rankN.jsonl``: eval's record fields, minus token ids,
    with the step and the split ("train", or "eval" for held-out episodes of ``--eval-every``)."""

    def __init__(self, folder: Path, rank: int) -> None:
        self.path = folder / f"rank{rank}.jsonl"
        self.trainer: Any = None

    def trim(self, step: int) -> None:
        """Drop what was logged after checkpoint ``step``, which a resumed run plays again: the
        training episodes generated at ``step`` or later, held-out ones after it (those of
        ``step`` itself were played before its checkpoint was saved); and a line cut short."""
        if not self.path.is_file():
            return
        kept = []
        for line in self.path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                rec = json.loads(line)
                logged, split = int(rec["step"]), rec.get("split")
            except (ValueError, TypeError, KeyError, RecursionError):
                continue
            if logged < step or (logged == step and split == "eval"):
                kept.append(line + "\n")
        staging = self.path.with_name(f".{self.path.name}.trim")
        staging.write_text("".join(kept), encoding="utf-8")
        os.replace(staging, self.path)

    def training(self) -> bool:
        """Whether the batch being played is a training one (not a held-out evaluation)."""
        return self.trainer is None or bool(self.trainer.model.training)

    def __call__(self, episodes: list[Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        trainer = self.trainer
        step = trainer.state.global_step if trainer is not None else 0
        training = self.training()
        with self.path.open("a", encoding="utf-8") as f:
            for ep in episodes:
                rec = {"step": step, "split": "train" if training else "eval"}
                rec.update((k, v) for k, v in ep.to_dict().items() if k not in _HEAVY_FIELDS)
                f.write(json.dumps(rec) + "\n")


def _summary(
    trainer: Any, cfg: TrainConfig, seconds: float, resumed: Path | None
) -> dict[str, Any]:
    """The run's figures from its episode records, per episode (report.summary's definition)."""
    from ..report.compare import held_out_change
    from ..report.summary import evaluations, windows

    history = trainer.state.log_history
    out = Path(cfg.output_dir)
    records = _read_episodes(out / "episodes")
    train = [r for r in records if r.get("split") == "train"]
    held_out = [r for r in records if r.get("split") == "eval"]
    played = len({r.get("step") for r in train})
    window = min(SUMMARY_WINDOW, max(1, played // 2))
    spans = windows(train, window)
    summary: dict[str, Any] = {
        "env": cfg.env,
        "processor": cfg.processor,
        "model": cfg.model,
        "credit": str(cfg.rollout_config().credit),
        "steps": trainer.state.global_step,
        "logged_steps": played,
        "window": window,
        "reward_start": spans["first"]["reward"] if spans else None,
        "reward_end": spans["last"]["reward"] if spans else None,
        "reward_best": spans["best"]["reward"] if spans else None,
        "train": spans,
        "held_out": evaluations(held_out),
        "held_out_change": held_out_change(held_out),
    }
    labels = cfg.mixture().labels
    if len(labels) > 1 or cfg.envs:
        summary["envs"] = {
            label: _env_summary(history, label, train, held_out, window) for label in labels
        }
    summary.update(
        seconds=round(seconds, 1),
        resumed_from=str(resumed) if resumed else None,
        output_dir=str(out),
        model_dir=str(out / "final"),
        logs_dir=str(out / "runs"),
        episodes_dir=str(out / "episodes"),
    )
    return summary


def _read_episodes(folder: Path) -> list[dict[str, Any]]:
    """Every rank's episode records (a line cut short by a crash is skipped)."""
    records = []
    for file in sorted(folder.glob("rank*.jsonl")):
        for line in file.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
    return records


def _env_summary(
    history: list[dict[str, Any]],
    label: str,
    train: list[dict[str, Any]],
    held_out: list[dict[str, Any]],
    window: int,
) -> dict[str, Any]:
    """One env's figures at the start, best and end of training, its last stage, held-out."""
    from ..report.summary import evaluations, windows

    spans = windows([r for r in train if r.get("env") == label], window)
    evals = evaluations([r for r in held_out if r.get("env") == label])
    stages = [h[f"rollout/{label}/stage"] for h in history if f"rollout/{label}/stage" in h]
    return {
        "reward_start": spans["first"]["reward"] if spans else None,
        "reward_end": spans["last"]["reward"] if spans else None,
        "stage": int(stages[-1]) if stages else None,
        "held_out_reward": evals["last"]["reward"] if evals else None,
        "train": spans,
        "held_out": evals,
    }

"""Trainer callbacks: progress on a terminal or in a log, and signals that end in a checkpoint."""

from __future__ import annotations

import os
import signal
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from transformers import TrainerCallback
from transformers.trainer_callback import ExportableState

from .. import streams
from . import checkpoints, rundir


def _info(logs: dict[str, Any]) -> str:
    info = f"reward {logs['reward']:.3f}"
    if "rollout/turns" in logs:
        info += f"  turns {logs['rollout/turns']:.1f}"
    if logs.get("rollout/status_error"):
        info += f"  env errors {logs['rollout/status_error']:.0%}"
    per_env = _per_env(logs, "rollout/")
    if per_env:
        info += "  (" + ", ".join(per_env) + ")"
    return info


def _per_env(logs: dict[str, Any], prefix: str) -> list[str]:
    """``sokoban 0.250 @2`` for each env with a reward in ``logs`` (@: its curriculum stage)."""
    out = []
    for key in sorted(logs):
        if key.startswith(prefix) and key.endswith("/env_reward") and key.count("/") == 2:
            label = key[len(prefix) : -len("/env_reward")]
            stage = logs.get(f"{prefix}{label}/stage")
            at = f" @{stage:.0f}" if isinstance(stage, int | float) else ""
            out.append(f"{label} {logs[key]:.3f}{at}")
    return out


# How many of the latest steps the time left is reckoned from.
PACE_WINDOW = 10


class Pace:
    """The run's own recent pace: the time left from the mean of its last ``window`` steps.

    The average over the whole run would carry its slow start (the first step loads and warms
    up) and a machine load that has since changed into every estimate: a run measured at 10.6 s
    quiet took 277 s at load 5. The latest steps say how fast it goes now.
    """

    def __init__(self, window: int = PACE_WINDOW, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.steps: deque[float] = deque(maxlen=window)  # seconds each of the latest steps took
        self.last: float | None = None

    def start(self) -> None:
        self.last = self.clock()

    def step(self) -> None:
        """One step ended now."""
        now = self.clock()
        if self.last is not None:
            self.steps.append(now - self.last)
        self.last = now

    def per_step(self) -> float | None:
        """Seconds per step lately; None before the first step ended."""
        return sum(self.steps) / len(self.steps) if self.steps else None

    def left(self, steps: int) -> float | None:
        """Seconds the next ``steps`` steps will take at this pace (never below 0), or None."""
        per = self.per_step()
        return None if per is None else max(0, steps) * per

    def clock_left(self, steps: int) -> str:
        """:meth:`left` as ``H:MM:SS``; ``-:--:--`` while there is no step to go by."""
        seconds = self.left(steps)
        return "-:--:--" if seconds is None else _clock(seconds)


class RichProgress(TrainerCallback):
    """One progress bar with the latest reward, instead of transformers' tqdm and log dicts."""

    def __init__(self) -> None:
        self.bar: Any = None
        self.task: Any = None
        self.info = self.held_out = ""
        self.evaluating = False
        self.pace = Pace()

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        self.bar = streams.progress_bar("training", "{task.fields[info]}", left="left")
        self.bar.start()
        self.task = self.bar.add_task(
            "train", total=state.max_steps, info="", completed=state.global_step, left="-:--:--"
        )
        self.pace.start()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.bar is None:
            return
        self.pace.step()
        left = self.pace.clock_left(state.max_steps - state.global_step)
        self.bar.update(self.task, completed=state.global_step, left=left)
        # The time-left column counts steps only: the bar says when a held-out eval follows.
        self.evaluating = bool(control.should_evaluate)  # set by transformers' flow callback
        self._show()

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        if self.bar is None or not logs:
            return
        if "reward" in logs:
            self.info = _info(logs)
        if "eval_reward" in logs:
            self.held_out, self.evaluating = f"held-out {logs['eval_reward']:.3f}", False
        self._show()

    def _show(self) -> None:
        tail = "held-out eval running" if self.evaluating else self.held_out
        self.bar.update(self.task, info="  ".join(p for p in (self.info, tail) if p))

    def say(self, text: str) -> None:
        """A line above the bar (before it starts: on the same stream)."""
        if self.bar is not None:
            self.bar.console.print(text, markup=False, highlight=False)
        else:
            print(text, file=streams.out(), flush=True)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


class LineProgress(TrainerCallback):
    """One line per logged step, for a log file or a cluster job where a bar would be noise.

    ``step 3/100  reward 0.125  turns 2.0  4.2 episodes/s  0:01:10 left``
    """

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream
        self.pace = Pace()

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.pace.start()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.pace.step()

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        if state.is_world_process_zero and logs and "eval_reward" in logs:
            held_out = ", ".join(_per_env(logs, "eval_rollout/"))
            print(
                f"step {state.global_step}/{state.max_steps}  held-out reward "
                f"{logs['eval_reward']:.3f}" + (f"  ({held_out})" if held_out else ""),
                file=self.stream or streams.out(),
                flush=True,
            )
        if not (state.is_world_process_zero and logs and "reward" in logs):
            return
        # Each optimizer step trains on this many episodes, across all processes.
        episodes = args.per_device_train_batch_size * args.gradient_accumulation_steps
        episodes *= args.world_size
        seconds = self.pace.per_step()
        rate = episodes / seconds if seconds else 0.0
        left = self.pace.clock_left(state.max_steps - state.global_step)
        stream = self.stream or streams.out()
        print(
            f"step {state.global_step}/{state.max_steps}  {_info(logs)}  "
            f"{rate:.1f} episodes/s  {left} left",
            file=stream,
            flush=True,
        )


class FirstStep(TrainerCallback):
    """Speaks until the first step has ended, which on a real model can take many minutes: when
    the trainer is ready (loading took ``began`` to now, on ``clock``), when the first rollout
    ends (how long it took, for how many episodes and turns), and when the step ends (its parts,
    rollout and update, and the run's time at that pace). ``say`` None: silent.

    A step plays its episodes first (``played``, told by the rollout's episode callback), then
    updates the model on them, so its rollout is the time from the step's start to ``played``.
    """

    def __init__(
        self,
        say: Callable[[str], None] | None,
        training: Callable[[], bool] = lambda: True,
        began: float | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.say, self.training, self.clock = say, training, clock
        self.began = began
        self.started: float | None = None  # when the first step began
        self.rollout: float | None = None  # seconds its rollout took
        self.step = 0
        self.done = False

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        loaded = f"Loaded in {self.clock() - self.began:.1f} s; " if self.began is not None else ""
        self._say(f"{loaded}step {state.global_step + 1} is playing its episodes...")

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.started is None and state.is_world_process_zero:
            self.started, self.step = self.clock(), state.global_step + 1

    def played(self, episodes: list[Any]) -> None:
        """The rollout of a batch ended (training or held-out)."""
        if self.started is None or self.rollout is not None or self.done or not self.training():
            return
        self.rollout = self.clock() - self.started
        turns = sum(e.turns for e in episodes) / len(episodes) if episodes else 0.0
        self._say(
            f"Step {self.step}: rollout {self.rollout:.1f} s ({len(episodes)} episodes, "
            f"{turns:.1f} turns each); updating the model..."
        )

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.started is None or self.done:
            return
        self.done = True
        took = self.clock() - self.started
        parts = ""
        if self.rollout is not None:
            parts = f" (rollout {self.rollout:.1f} s, update {max(0.0, took - self.rollout):.1f} s)"
        left = state.max_steps - state.global_step
        ahead = f"; at this pace the {left} steps left take about {_clock(left * took)}"
        self._say(f"Step {self.step} took {took:.1f} s{parts}{ahead if left > 0 else ''}.")

    def _say(self, text: str) -> None:
        if self.say is not None:
            self.say(text)


def _clock(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


class CurriculumState(TrainerCallback, ExportableState):
    """Saves the curricula's progress in each checkpoint (transformers writes it into the
    checkpoint's trainer_state.json, under ``stateful_callbacks``); :meth:`saved` reads it back."""

    def __init__(self, progress: Any = None) -> None:
        self.progress = progress

    def state(self) -> dict[str, Any]:
        saved = self.progress.state() if self.progress is not None else {}
        return {"args": {}, "attributes": {"saved": saved}}

    @classmethod
    def saved(cls, checkpoint: Any) -> dict[str, Any] | None:
        """The progress saved in ``checkpoint``, or None (a checkpoint from before curricula)."""
        import json

        try:
            data = json.loads((Path(checkpoint) / "trainer_state.json").read_text("utf-8"))
            entry = data["stateful_callbacks"][cls.__name__]
            entry = entry[0] if isinstance(entry, list) else entry
            saved = entry["attributes"]["saved"]
        except (OSError, ValueError, KeyError, IndexError, TypeError):
            return None
        return saved if isinstance(saved, dict) else None


class StopOnSignal(TrainerCallback):
    """A signal that stops the run (Ctrl-C, SIGTERM, SIGHUP) or a reader of its output that went
    away (``train | tee log`` under Ctrl-C, a closed terminal): finish the step, save a
    checkpoint, stop. A second Ctrl-C or SIGTERM: exit at once.

    The signal only sets a flag; the trainer acts on it at the end of the step (the next safe
    point), so no checkpoint is written from inside a half-done step. With several processes
    the flag is shared at each step end, so every rank stops at the same step (one that got
    no signal would otherwise wait forever in the next collective call). A lost stdout or
    stderr stops the run as SIGPIPE would stop a program that does not ignore it, with exit
    141, but after the save (:mod:`trl_env.streams` drops what is written to it meanwhile).
    """

    # SIGHUP: the terminal closed (it does not exist on Windows)
    SIGNALS = tuple(
        getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
    )
    # A second one of these means "now"; a terminal that closes may send SIGHUP twice (the
    # kernel, then the shell), which must not cost the checkpoint.
    URGENT = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, out: Path | None = None) -> None:
        self.out = out  # the run's folder, to name the command that carries the run on
        self.received: int | None = None
        self.previous: dict[int, Any] = {}
        self.checkpoint: Path | None = None  # the one this step's end saves, once asked
        self._unlisten: Callable[[], None] | None = None

    def _handler(self, signum: int, frame: Any) -> None:
        if self.received is not None:
            if signum not in self.URGENT:
                return
            # The checkpoint appears whole or not at all (checkpoints.atomic_trainer): a second
            # signal can come after it appeared, while the trainer still tidies up.
            saved = self.checkpoint if self.checkpoint and self.checkpoint.is_dir() else None
            done = f"{saved.name} was saved" if saved else "without a checkpoint"
            then = f" Carry the run on with: {rundir.next_command(self.out)}" if self.out else ""
            _say(f"\nSecond signal: stopping now, {done}.{then}\n")
            os._exit(128 + signum)  # at once: no cleanup that could hang on env threads
        self.request(signum)

    def request(self, signum: int) -> None:
        """Stop at the end of this step as if ``signum`` had come (once: a later one changes
        nothing)."""
        if self.received is not None:
            return
        self.received = signum
        name = signal.Signals(signum).name
        _say(f"\n{name}: saving a checkpoint at the end of this step...\n")

    def _stream_lost(self, name: str) -> None:
        self.request(signal.SIGPIPE)

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        for sig in self.SIGNALS:
            try:
                self.previous[sig] = signal.signal(sig, self._handler)
            except ValueError:  # not the main thread (a notebook's worker): leave signals be
                return
        self._unlisten = streams.on_lost(self._stream_lost)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if _any_rank(self.received):
            control.should_save = True
            control.should_training_stop = True
            self.checkpoint = checkpoints.path(args.output_dir, state.global_step)
            if self.received is None:
                self.received = signal.SIGTERM  # another rank got it; leave the same way

    def restore(self) -> None:
        """Put the previous handlers back (the caller does, once the final files are written)."""
        for sig, previous in self.previous.items():
            signal.signal(sig, previous)
        self.previous.clear()
        if self._unlisten is not None:
            self._unlisten()
            self._unlisten = None


def _say(text: str) -> None:
    """Write to stderr from a signal handler: no lock to wait on, and a stderr whose reader is
    gone (the pipe that died with the same Ctrl-C) costs nothing."""
    try:
        os.write(2, text.encode())
    except OSError:
        pass


def _any_rank(received: int | None) -> bool:
    """Whether any process got a signal (one all-reduce per step when there are several)."""
    import torch
    import torch.distributed as dist

    flag = received is not None
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return flag
    value = torch.tensor([1.0 if flag else 0.0])
    if dist.get_backend() == "nccl":
        value = value.cuda()
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item() > 0)

"""Trainer callbacks: a progress display, Ctrl-C to checkpoint, and the reward history."""

from __future__ import annotations

import signal
from typing import Any

from transformers import TrainerCallback


class RichProgress(TrainerCallback):
    """One progress bar with the latest reward, instead of transformers' tqdm and log dicts."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.bar: Any = None
        self.task: Any = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not (self.enabled and state.is_world_process_zero):
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.bar = Progress(
            TextColumn("[bold]training"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[info]}"),
        )
        self.bar.start()
        self.task = self.bar.add_task(
            "train", total=state.max_steps, info="", completed=state.global_step
        )

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.bar is not None:
            self.bar.update(self.task, completed=state.global_step)

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        if self.bar is None or not logs or "reward" not in logs:
            return
        info = f"reward {logs['reward']:.3f}"
        if "rollout/turns" in logs:
            info += f"  turns {logs['rollout/turns']:.1f}"
        if logs.get("rollout/status_error"):
            info += f"  env errors {logs['rollout/status_error']:.0%}"
        self.bar.update(self.task, info=info)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


class CheckpointOnInterrupt(TrainerCallback):
    """First Ctrl-C: finish the step, save a checkpoint, stop. Second Ctrl-C: stop at once."""

    def __init__(self) -> None:
        self.requested = False
        self.previous: Any = None

    def _handler(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        try:
            self.previous = signal.signal(signal.SIGINT, self._handler)
        except ValueError:  # not the main thread: leave Ctrl-C alone
            self.previous = None

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.requested:
            control.should_save = True
            control.should_training_stop = True

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)

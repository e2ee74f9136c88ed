"""The training bar and lines through a run's callbacks (transformers' own flow callback drives
them), and the pace their time left is reckoned from."""

from __future__ import annotations

import io

from transformers import TrainingArguments
from transformers.trainer_callback import DefaultFlowCallback, TrainerControl, TrainerState

from trl_env.training.callbacks import LineProgress, Pace, RichProgress


def test_the_bar_says_when_a_held_out_eval_runs_and_keeps_its_figure(tmp_path):
    args = TrainingArguments(
        output_dir=str(tmp_path), eval_strategy="steps", eval_steps=2, logging_steps=1,
        report_to=[], use_cpu=True,
    )  # fmt: skip
    state = TrainerState(max_steps=4, is_world_process_zero=True)
    state.compute_steps(args, max_steps=4)  # as the trainer does at the start: eval_steps 2
    flow, progress = DefaultFlowCallback(), RichProgress()
    progress.on_train_begin(args, state, TrainerControl())
    shown = {}
    for step in range(1, 5):  # the trainer's order: step end, the step's log, then the eval
        control = TrainerControl()
        state.global_step = step
        flow.on_step_end(args, state, control)
        progress.on_step_end(args, state, control)
        progress.on_log(args, state, control, logs={"reward": step / 10})
        shown[step] = progress.bar.tasks[0].fields["info"]
        if control.should_evaluate:
            progress.on_log(args, state, control, logs={"eval_reward": step / 8})
            shown[f"{step} evaluated"] = progress.bar.tasks[0].fields["info"]
    progress.on_train_end(args, state, TrainerControl())
    assert shown[1] == "reward 0.100"
    assert shown[2] == "reward 0.200  held-out eval running"
    assert shown["2 evaluated"] == "reward 0.200  held-out 0.250"
    assert shown[3] == "reward 0.300  held-out 0.250"  # the last held-out figure stays
    assert shown[4].endswith("held-out eval running") and shown["4 evaluated"].endswith("0.500")
    assert progress.bar is None


class Clock:
    """A stand-in for time.monotonic that moves only when told (a test cannot wait minutes)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def paced(durations: list[float], window: int = 10) -> Pace:
    clock = Clock()
    pace = Pace(window, clock)
    pace.start()
    for seconds in durations:
        clock.now += seconds
        pace.step()
    return pace


def test_time_left_follows_the_recent_steps_not_the_whole_run():
    # a slow first step (loading, warm-up), then the run's own pace
    warm = paced([30.0] + [2.0] * 10)
    assert warm.per_step() == 2.0 and warm.left(5) == 10.0
    assert warm.clock_left(5) == "0:00:10"  # the whole run's average said 0:00:23
    # the machine got busier: the estimate follows within one window
    loaded = paced([1.0] * 10 + [4.0] * 10)
    assert loaded.left(10) == 40.0
    partly = paced([1.0] * 10 + [4.0] * 5)
    assert 10.0 < partly.left(10) < 40.0  # half the window at each pace: 25 s


def test_time_left_before_any_step_and_past_the_last():
    assert paced([]).left(3) is None and paced([]).clock_left(3) == "-:--:--"
    assert paced([5.0]).left(-1) == 0.0  # never a negative time ("-1:58:59 left" was shown)


def test_the_bar_and_the_lines_show_the_recent_pace(tmp_path):
    args = TrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True)
    state = TrainerState(max_steps=12, is_world_process_zero=True)
    clock = Clock()
    stream = io.StringIO()
    bar, lines = RichProgress(), LineProgress(stream)
    bar.pace, lines.pace = Pace(clock=clock), Pace(clock=clock)
    for callback in (bar, lines):
        callback.on_train_begin(args, state, TrainerControl())
    for step in range(1, 12):
        clock.now += 60.0 if step == 1 else 3.0
        state.global_step = step
        for callback in (bar, lines):
            callback.on_step_end(args, state, TrainerControl())
            callback.on_log(args, state, TrainerControl(), logs={"reward": 0.5})
    assert bar.bar.tasks[0].fields["left"] == "0:00:03"  # one step left, at 3 s a step
    bar.on_train_end(args, state, TrainerControl())
    last = stream.getvalue().splitlines()[-1]
    assert last.startswith("step 11/12") and last.endswith("0:00:03 left")
    per_step = args.per_device_train_batch_size * args.gradient_accumulation_steps
    assert f"{per_step / 3.0:.1f} episodes/s" in last

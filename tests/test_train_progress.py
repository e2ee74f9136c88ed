"""The training bar and lines through a run's callbacks (transformers' own flow callback drives
them), and the pace their time left is reckoned from."""

from __future__ import annotations

import io
import os
import subprocess

from transformers import TrainingArguments
from transformers.trainer_callback import DefaultFlowCallback, TrainerControl, TrainerState

from trl_env.testing.fake_dist import console_script
from trl_env.testing.timeouts import scaled
from trl_env.training.callbacks import FirstStep, LineProgress, Pace, RichProgress


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


class Played:
    """An episode as the first step's callback reads it: its turns."""

    def __init__(self, turns: int) -> None:
        self.turns = turns


def test_the_first_step_says_what_its_rollout_and_update_took_and_the_run_s_time(tmp_path):
    args = TrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True)
    state = TrainerState(max_steps=10, is_world_process_zero=True)
    clock, said = Clock(), []
    training = [True]
    first = FirstStep(said.append, lambda: training[0], began=0.0, clock=clock)
    clock.now = 95.0  # the imports and the model's loading
    first.on_train_begin(args, state, TrainerControl())
    assert said == ["Loaded in 95.0 s; step 1 is playing its episodes..."]
    for step in (1, 2):
        first.on_step_begin(args, state, TrainerControl())
        clock.now += 540.0  # a real model's rollout: minutes before the step ends
        first.played([Played(3), Played(2)])
        clock.now += 30.0
        state.global_step = step
        first.on_step_end(args, state, TrainerControl())
        training[0] = False  # the held-out evaluation after the first step
        first.played([Played(1)])
        training[0] = True
    assert said[1:] == [
        "Step 1: rollout 540.0 s (2 episodes, 2.5 turns each); updating the model...",
        "Step 1 took 570.0 s (rollout 540.0 s, update 30.0 s); at this pace the 9 steps left "
        "take about 1:25:30.",
    ]  # and nothing after the first step: the step lines take over


def test_a_run_s_first_line_comes_before_the_training_stack_is_imported(tmp_path):
    """The first line says what is loading before torch is imported, which takes seconds on a
    quiet machine and minutes on a busy one (before: nothing for the first step's length);
    --quiet says nothing. A stand-in torch announces its import and stops the run there."""
    stand_in = tmp_path / "stand_in"
    (stand_in / "torch").mkdir(parents=True)
    (stand_in / "torch" / "__init__.py").write_text(
        "import sys\nprint('importing torch', flush=True)\nsys.exit(3)\n"
    )
    path = [str(stand_in), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    command = [console_script(), "train", "--env", "guess", "--processor", "qwen3", "--no-check"]
    command += ["--max-steps", "7", "--batch-size", "4", "--num-generations", "2"]
    for quiet in (False, True):
        out = tmp_path / f"run-{quiet}"
        extra = ["--output-dir", str(out)] + (["--quiet"] if quiet else [])
        ran = subprocess.run(
            [*command, *extra], env=env, capture_output=True, text=True, timeout=scaled(120)
        )
        lines = ran.stdout.splitlines()
        assert ran.returncode == 3 and "importing torch" in lines, ran.stdout + ran.stderr[-2000:]
        said = lines[: lines.index("importing torch")]
        if quiet:
            assert said == []
        else:
            assert said == [
                "Loading the model tiny (qwen3) and preparing guess; then 7 GRPO steps of 4 "
                "episodes (turns of at most 16 new tokens)."
            ]

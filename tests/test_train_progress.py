"""The training bar through a run's callbacks, driven by transformers' own flow callback."""

from __future__ import annotations

from transformers import TrainingArguments
from transformers.trainer_callback import DefaultFlowCallback, TrainerControl, TrainerState

from trl_env.training.callbacks import RichProgress


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

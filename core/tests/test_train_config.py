"""The training run's options and directory, without training: layering, saving, refusing."""

from __future__ import annotations

import dataclasses
import zipfile
from pathlib import Path

import pytest

from trl_env.config import RolloutConfig
from trl_env.errors import UsageError
from trl_env.training import checkpoints, rundir
from trl_env.training.config import (
    GRPO_DEFAULTS,
    TINY_DEFAULTS,
    load_config,
    resolve,
    save_config,
)

BASE = {"env": "guess", "processor": "qwen3"}


def declared(name: str) -> object:
    return {f.name: f.default for f in dataclasses.fields(RolloutConfig)}[name]


def test_tiny_defaults_apply_to_the_tiny_model_only():
    (key, tiny), *_ = TINY_DEFAULTS["rollout"].items()
    assert resolve(dict(BASE)).rollout[key] == tiny
    assert resolve({**BASE, "model": "/models/real"}).rollout[key] == declared(key)
    assert resolve({**BASE, "rollout": {key: 3}}).rollout[key] == 3  # given beats any default


def test_grpo_defaults_and_given_values_layer():
    cfg = resolve({**BASE, "grpo": {"learning_rate": "2e-5", "beta": 0}})
    assert cfg.grpo["learning_rate"] == 2e-5  # YAML reads 2e-5 as text; it is taken as a number
    assert cfg.grpo["beta"] == 0
    assert cfg.grpo["max_steps"] == GRPO_DEFAULTS["max_steps"]


def test_sampling_belongs_to_the_trainer():
    cfg = resolve({**BASE, "rollout": {"temperature": 0.7}})
    assert cfg.grpo["temperature"] == 0.7 and "temperature" not in cfg.rollout
    assert cfg.rollout_config().temperature == 0.7
    with pytest.raises(UsageError, match="give temperature once"):
        resolve({**BASE, "rollout": {"temperature": 0.7}, "grpo": {"temperature": 0.9}})


def test_saved_config_round_trips(tmp_path):
    cfg = resolve({**BASE, "env_args": {"high": 9}, "rollout": {"env_isolation": "process"}})
    save_config(cfg, tmp_path / "config.yaml")
    again = resolve(load_config(tmp_path / "config.yaml"))
    assert again == cfg


def test_resume_may_only_extend_the_run(tmp_path):
    saved = resolve({**BASE, "grpo": {"max_steps": 5}}).to_dict()
    saved["rollout"]["env_isolation"] = "thread"
    longer = resolve({"grpo": {"max_steps": 9}}, saved)
    assert longer.grpo["max_steps"] == 9 and longer.env == "guess"
    with pytest.raises(UsageError, match=r"grpo.learning_rate is 0.5 here but 1e-05"):
        resolve({"grpo": {"learning_rate": 0.5}}, saved)
    with pytest.raises(UsageError, match=r"env_args\.high is 5 here"):
        resolve({"env_args": {"high": 5}}, {**saved, "env_args": {"high": 9}})


def test_output_dir_rules(tmp_path):
    run = tmp_path / "run"
    rundir.check(run, resume=False, overwrite=False)  # new: fine
    run.mkdir()
    rundir.check(run, resume=False, overwrite=False)  # empty: fine
    rundir.claim(run, "train")
    (run / "config.yaml").write_text("env: guess\n")
    (run / "checkpoint-3").mkdir()
    with pytest.raises(UsageError, match=r"not empty .*--resume.*--overwrite"):
        rundir.check(run, resume=False, overwrite=False)
    rundir.check(run, resume=True, overwrite=False)
    rundir.check(run, resume=False, overwrite=True)
    rundir.clear(run)
    assert list(run.iterdir()) == []
    (run / "thesis.tex").write_text("mine")
    with pytest.raises(UsageError, match=r"thesis\.tex"):
        rundir.check(run, resume=False, overwrite=True)
    with pytest.raises(UsageError, match="give one"):
        rundir.check(run, resume=True, overwrite=True)


def test_overwrite_replaces_only_a_run_s_folder_and_never_follows_a_link(tmp_path):
    # A user's folder whose names are a run's: never a run's without the marker a run leaves.
    mine = tmp_path / "mine"
    for folder in ("runs", "final"):
        (mine / folder).mkdir(parents=True)
        (mine / folder / "notes.txt").write_text("mine")
    (mine / "README.md").write_text("# my project")
    (mine / "config.yaml").write_text("lr: 3\n")
    before = sorted(p.relative_to(mine) for p in mine.rglob("*"))
    with pytest.raises(UsageError, match=r"--overwrite refused: .*not written by a trl-env run"):
        rundir.check(mine, resume=False, overwrite=True)
    (mine / rundir.MARKER).symlink_to(tmp_path / "elsewhere")  # a link is no marker either
    with pytest.raises(UsageError, match="not written by a trl-env run"):
        rundir.check(mine, resume=False, overwrite=True)
    (mine / rundir.MARKER).unlink()
    assert sorted(p.relative_to(mine) for p in mine.rglob("*")) == before

    # A run's folder whose entries link out of it: the links go, what they point to stays.
    run = tmp_path / "run"
    run.mkdir()
    rundir.claim(run, "train")
    (run / "runs").symlink_to(mine / "runs", target_is_directory=True)
    (run / "README.md").symlink_to(mine / "README.md")
    (run / "final").mkdir()
    (run / "final" / "outside").symlink_to(mine / "final", target_is_directory=True)
    rundir.check(run, resume=False, overwrite=True)
    rundir.clear(run)
    assert list(run.iterdir()) == []
    assert sorted(p.relative_to(mine) for p in mine.rglob("*")) == before
    assert (mine / "runs" / "notes.txt").read_text() == "mine"

    # The marker is never written through a link either.
    (run / rundir.MARKER).symlink_to(mine / "README.md")
    with pytest.raises(UsageError, match="cannot be marked"):
        rundir.claim(run, "train")
    assert (mine / "README.md").read_text() == "# my project"


def make_checkpoint(folder: Path) -> Path:
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    folder.mkdir(parents=True)
    (folder / "trainer_state.json").write_text('{"global_step": 1}')
    save_file({"w": torch.ones(64, 64)}, str(folder / "model.safetensors"))
    torch.save({"state": torch.zeros(32)}, folder / "optimizer.pt")
    return folder


def truncate(file: Path) -> None:
    data = file.read_bytes()
    file.write_bytes(data[: len(data) // 2])


def test_checkpoint_files_are_checked_newest_first(tmp_path):
    old = make_checkpoint(tmp_path / "checkpoint-2")
    new = make_checkpoint(tmp_path / "checkpoint-10")
    assert checkpoints.problem(new) is None
    restart = "trl-env train --config CONFIG --overwrite"
    assert checkpoints.pick(tmp_path, restart) == (new, [])
    truncate(new / "model.safetensors")
    assert "model.safetensors is truncated" in str(checkpoints.problem(new))
    chosen, warnings = checkpoints.pick(tmp_path, restart)
    assert chosen == old and "checkpoint-10 is not usable" in warnings[0]
    truncate(old / "optimizer.pt")
    assert "optimizer.pt is truncated" in str(checkpoints.problem(old))
    with pytest.raises(UsageError, match="no usable checkpoint") as refused:
        checkpoints.pick(tmp_path, restart)
    assert str(refused.value).endswith(f"start the run again with: {restart}")
    assert zipfile.is_zipfile(make_checkpoint(tmp_path / "checkpoint-11") / "optimizer.pt")


@pytest.mark.parametrize(
    ("line", "section"),
    [("learning_rate: 0.01", "grpo"), ("temperature: 0.7", "grpo"),
     ("max_new_tokens: 8", "rollout"), ("alpha: 16", "lora")],
)  # fmt: skip
def test_a_section_s_option_at_the_top_of_a_config_file_is_sent_under_its_section(
    tmp_path, line, section
):
    path = tmp_path / "c.yaml"
    path.write_text(f"env: guess\nprocessor: qwen3\n{line}\n", encoding="utf-8")
    key, value = line.split(": ")
    with pytest.raises(UsageError) as refused:
        load_config(path)
    assert f"belongs under {section}: ({section}: {{{key}: {value}}})" in str(refused.value)
    path.write_text(f"env: guess\nprocessor: qwen3\n{section}:\n  {line}\n", encoding="utf-8")
    assert str(load_config(path)[section][key]) == value  # where the hint says, it loads


def test_an_unknown_top_level_key_gets_the_nearest_known_one(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("env: guess\nprocesor: qwen3\n", encoding="utf-8")
    with pytest.raises(UsageError, match="Did you mean 'processor'"):
        load_config(path)


def test_a_stopped_run_is_carried_on_by_resume_or_by_a_start_again(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    rundir.claim(run, "train")
    (run / "config.yaml").write_text("env: guess\n")
    (run / ".staging-checkpoint-3").mkdir()  # killed while saving: not a checkpoint
    assert rundir.next_command(run) == f"trl-env train --config {run / 'config.yaml'} --overwrite"
    rundir.check(run, resume=False, overwrite=True)  # what that command asks: allowed
    make_checkpoint(run / "checkpoint-2")
    assert rundir.next_command(run) == f"trl-env train --output-dir {run} --resume"


def test_a_run_has_finished_when_it_trained_max_steps(tmp_path):
    run = tmp_path / "run"
    make_checkpoint(run / "checkpoint-1")  # its trainer state says step 1
    assert rundir.trained_steps(run) == 1
    assert rundir.finished(run, 2) is None
    said = rundir.finished(run, 1)
    assert said is not None and "nothing changed" in said and str(run / "checkpoint-1") in said
    # a run stopped by a signal has trained only as far as its checkpoints
    (run / "summary.json").write_text('{"steps": 5, "stopped_by": "SIGINT"}')
    assert rundir.trained_steps(run) == 1
    (run / "summary.json").write_text('{"steps": 5}')  # ended by itself at step 5
    (run / "final").mkdir()
    assert rundir.trained_steps(run) == 5 and str(run / "final") in str(rundir.finished(run, 5))

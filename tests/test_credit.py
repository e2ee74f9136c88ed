"""Credit per turn: each model turn's tokens get the advantage of the rewards from that turn on.

The expected advantages are computed here with numpy, the way docs/learning.md writes the
formula: returns to go as reversed cumulative sums of a padded array, the group's baseline per
turn as a NaN-mean over the episodes that played that turn, its scale the standard deviation of
every return to go of the group (n - 1), plus TRL's 1e-4.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from trl_env import make_rollout_func
from trl_env.errors import UsageError
from trl_env.training.credit import CreditGRPOTrainer, turn_advantages

pytestmark = pytest.mark.slow


def expected(
    turn_rewards: list[list[float]], rewards: list[float], group: int
) -> list[list[float]]:
    """Advantages per turn, computed independently of trl_env (see the module docstring)."""
    out: list[list[float]] = []
    for g in range(0, len(rewards), group):
        members = range(g, g + group)
        width = max(len(turn_rewards[i]) for i in members)
        table = np.full((group, width), np.nan)
        for row, i in enumerate(members):
            r = np.array(turn_rewards[i], dtype=float)
            if not len(r) or math.isnan(rewards[i]):
                continue
            r[-1] = rewards[i] - r[:-1].sum()  # the last turn earns what the others left
            table[row, : len(r)] = np.cumsum(r[::-1])[::-1]
        baseline = np.nanmean(table, axis=0) if np.isfinite(table).any() else table[0]
        pooled = table[np.isfinite(table)]
        scale = pooled.std(ddof=1) if pooled.size > 1 else 0.0
        for row in range(group):
            known = np.isfinite(table[row])
            out.append(list((table[row][known] - baseline[known]) / (scale + 1e-4)))
    return out


# Two groups of four; rows 2 and 5 end early, row 7 is an infrastructure failure (no reward).
TURN_REWARDS = [
    [0.2, 0.0, 0.8],
    [0.0, 0.2, 0.0],
    [0.2],
    [0.0, 0.0, 0.0],
    [0.5, -0.25, 0.1, 0.3],
    [1.0],
    [0.0, 0.3],
    [0.1, 0.1],
]
REWARDS = [1.0, 0.2, 0.2, 0.0, 0.6, 1.0, 0.3, math.nan]


def test_turn_advantages_follow_the_formula_on_a_hand_made_batch():
    got = turn_advantages(TURN_REWARDS, REWARDS, group=4)
    want = expected(TURN_REWARDS, REWARDS, 4)
    assert [len(a) for a in got] == [3, 3, 1, 3, 4, 1, 2, 0]
    for a, b in zip(got, want, strict=True):
        assert a == pytest.approx(b, abs=1e-9)
    # by hand, group one's first turn: returns 1.0, 0.2, 0.2, 0.0 against their mean 0.35
    g = [1.0, 0.8, 0.8, 0.2, 0.2, 0.0, 0.2, 0.0, 0.0, 0.0]  # every return to go of group one
    assert got[0][0] == pytest.approx((1.0 - 0.35) / (np.std(g, ddof=1) + 1e-4))
    # its third turn is played by rows 0, 1 and 3 only: baseline (0.8 + 0.0 + 0.0) / 3
    assert got[0][2] == pytest.approx((0.8 - 0.8 / 3) / (np.std(g, ddof=1) + 1e-4))


def test_one_turn_episodes_get_grpo_own_advantages():
    rewards = [0.0, 0.5, 1.0, 0.25, 0.3, 0.3, 0.3, 0.9]
    got = turn_advantages([[r] for r in rewards], rewards, group=4)
    r = torch.tensor(rewards).view(-1, 4)
    grpo = (r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)
    assert [a[0] for a in got] == pytest.approx(grpo.flatten().tolist(), abs=1e-6)
    unscaled = turn_advantages([[r] for r in rewards], rewards, group=4, scale="none")
    centred = (r - r.mean(1, keepdim=True)).flatten().tolist()
    assert [a[0] for a in unscaled] == pytest.approx(centred)


class FixedRollout:
    """A rollout function that returns the same hand-made batch each call: three turns of
    sampled ids, each followed by two env ids (masked), rows as TURN_REWARDS."""

    def __init__(self, credit: str | None) -> None:
        if credit is not None:
            self.credit = credit

    def __call__(self, prompts: list[str], trainer: object) -> dict[str, list]:
        cols: dict[str, list] = {k: [] for k in ("prompt_ids", "completion_ids", "logprobs")}
        cols.update(env_mask=[], env_reward=[], env_turn_starts=[], env_turn_rewards=[])
        for i, _ in enumerate(prompts):
            ids, mask, starts = [], [], []
            for t, _r in enumerate(TURN_REWARDS[i]):
                starts.append(len(ids))
                sampled = [100 + i + t + k for k in range(1 + (i + t) % 3)]
                ids += [*sampled, 7, 8]
                mask += [1] * len(sampled) + [0, 0]
            failed = math.isnan(REWARDS[i])
            cols["prompt_ids"].append([11, 12, 13 + i % 2])
            cols["completion_ids"].append(ids)
            cols["logprobs"].append([0.0] * len(ids))
            cols["env_mask"].append([0] * len(ids) if failed else mask)
            cols["env_reward"].append(None if failed else REWARDS[i])
            cols["env_turn_starts"].append(starts)
            cols["env_turn_rewards"].append(TURN_REWARDS[i])
        return cols


PROMPTS = ["a"] * 4 + ["b"] * 4


def _scored(grpo_trainer, rollout, trainer=None):
    t = grpo_trainer(rollout, PROMPTS, trainer=trainer, per_device_train_batch_size=8)
    t.model.train()
    return t, t._generate_and_score_completions([{"prompt": p} for p in PROMPTS])


def test_every_token_of_a_turn_gets_that_turns_advantage(grpo_trainer):
    rollout = FixedRollout("turn")
    trainer, out = _scored(grpo_trainer, rollout, CreditGRPOTrainer)
    got = out["advantages"]
    cols = rollout(PROMPTS, None)
    assert got.shape == out["completion_ids"].shape
    want = expected(TURN_REWARDS, REWARDS, 4)
    for i, (starts, mask) in enumerate(zip(cols["env_turn_starts"], cols["env_mask"], strict=True)):
        row = torch.zeros(got.shape[1])
        for k, sampled in enumerate(mask):
            if sampled:
                turn = max(t for t, s in enumerate(starts) if s <= k)
                row[k] = want[i][turn]
        assert torch.allclose(got[i], row, atol=1e-5), (i, got[i], row)
    # env tokens and padding stay out of the loss, the failed row entirely
    assert not got[7].any()
    assert trainer._metrics["train"]["credit/frac_episodes_zero_advantage"] == [0.125]


def test_episode_credit_is_grpo_trainer_bit_for_bit(grpo_trainer):
    stock, a = _scored(grpo_trainer, FixedRollout(None))
    ours, b = _scored(grpo_trainer, FixedRollout("episode"), CreditGRPOTrainer)
    assert a["advantages"].dim() == 1 and torch.equal(a["advantages"], b["advantages"])
    for t in (stock, ours):  # as Trainer.train sets it before a step's losses
        t.current_gradient_accumulation_steps = 1
    loss_a = stock.compute_loss(stock.model, a)
    loss_b = ours.compute_loss(ours.model, b)
    assert torch.equal(loss_a, loss_b)
    loss_a.backward()
    loss_b.backward()
    for p, q in zip(stock.model.parameters(), ours.model.parameters(), strict=True):
        assert (p.grad is None and q.grad is None) or torch.equal(p.grad, q.grad)
    # and a whole training step, from the same weights, ends on the same weights
    stock, _ = _scored(grpo_trainer, FixedRollout(None))
    ours, _ = _scored(grpo_trainer, FixedRollout("episode"), CreditGRPOTrainer)
    start = [p.detach().clone() for p in stock.model.parameters()]
    for t in (stock, ours):
        t.args.learning_rate = 1e-2
        torch.manual_seed(0)  # the batch's shuffle draws from torch's generator
        t.train()
    for p, q in zip(stock.model.parameters(), ours.model.parameters(), strict=True):
        assert torch.equal(p, q)
    assert any(not torch.equal(p, q) for p, q in zip(start, ours.model.parameters(), strict=True))


class StepRewardEnv:
    """Three turns; the reward after each step is the share of its first letters so far that
    are "a", so it goes up and down within an episode; ``own`` gives a ``turn_reward`` too."""

    own = False

    def __init__(self) -> None:
        self.reward, self.alive, self.n, self.hits, self.last = 0.0, True, 0, 0, 0.0

    def reset(self, seed: str) -> str:
        return f"Start {seed}: say words."

    def step(self, action: str) -> str:
        self.n += 1
        hit = action.strip()[:1].lower() in "aeiou"
        self.hits += hit
        self.reward = self.hits / self.n
        self.last = 0.25 if hit else -0.125
        self.alive = self.n < 3
        return f"{self.hits} of {self.n}."

    @property
    def turn_reward(self) -> float | None:
        return self.last if self.own else None


class OwnTurnRewardEnv(StepRewardEnv):
    own = True


@pytest.mark.parametrize("env", [StepRewardEnv, OwnTurnRewardEnv])
def test_the_rollout_records_each_turns_reward_and_tokens(qwen3, grpo_trainer, env):
    episodes: list = []
    rollout = make_rollout_func(
        env=env,
        processor=qwen3.processor,
        max_new_tokens=5,
        credit="turn",
        on_episodes=episodes.extend,
    )
    _, out = _scored(grpo_trainer, rollout, CreditGRPOTrainer)
    rollout.close()
    assert len(episodes) == 8
    for ep in episodes:
        assert len(ep.turn_rewards) == len(ep.turn_starts) == ep.turns == 3
        assert math.fsum(ep.turn_rewards) == pytest.approx(ep.reward)
        # each turn starts where a run of sampled ids starts, and nowhere else
        runs = [k for k, m in enumerate(ep.env_mask) if m and (k == 0 or not ep.env_mask[k - 1])]
        assert ep.turn_starts == runs
        if env.own:  # the env's own figure for every turn but the last
            assert all(r in (0.25, -0.125) for r in ep.turn_rewards[:-1])
    want = expected([e.turn_rewards for e in episodes], [e.reward for e in episodes], 4)
    for i, ep in enumerate(episodes):
        for k, sampled in enumerate(ep.env_mask):
            turn = max(t for t, s in enumerate(ep.turn_starts) if s <= k)
            a = want[i][turn] if sampled else 0.0
            assert out["advantages"][i, k].item() == pytest.approx(a, abs=1e-5)


def test_credit_per_turn_reads_rewards_in_worker_processes(qwen3):

    episodes = qwen3.play(
        ["train-1", "train-2"],
        "guess",
        max_new_tokens=4,
        max_turns=3,
        credit="turn",
        env_isolation="process",
    )
    for ep in episodes:
        assert ep.status in ("done", "max_turns") and len(ep.turn_rewards) == ep.turns
        assert math.fsum(ep.turn_rewards) == pytest.approx(ep.reward)


def test_a_reward_that_is_no_number_after_a_step_fails_only_its_episode(qwen3, scripted_env):

    def env():
        return scripted_env(turns=3, fault="bad-reward", fault_turn=2)

    episodes = qwen3.play(["s1", "s2"], env, max_new_tokens=4, credit="turn")
    for ep in episodes:
        assert ep.status == "error" and ep.masked
        assert ep.error == "ScriptedEnv.reward is not a finite number after a step: nan"


def test_turn_credit_with_grpo_trainer_itself_is_one_sentence(qwen3, grpo_trainer):
    rollout = make_rollout_func(env=StepRewardEnv, processor=qwen3.processor, credit="turn")
    trainer = grpo_trainer(rollout, PROMPTS, per_device_train_batch_size=8)
    with pytest.raises(UsageError, match=r"use trl_env\.training\.credit\.CreditGRPOTrainer"):
        trainer._generate_and_score_completions([{"prompt": p} for p in PROMPTS])
    rollout.close()


def test_a_bad_credit_is_one_sentence():
    with pytest.raises(UsageError) as err:
        make_rollout_func(env="guess", processor="qwen3", credit="turns")
    assert str(err.value) == "Invalid rollout option: credit is 'turns'; choose episode or turn."


def test_the_model_trains_with_credit_per_turn(qwen3, grpo_trainer):
    rollout = make_rollout_func(
        env=StepRewardEnv, processor=qwen3.processor, max_new_tokens=5, credit="turn"
    )
    trainer = grpo_trainer(
        rollout, PROMPTS, trainer=CreditGRPOTrainer, per_device_train_batch_size=8,
        learning_rate=1e-2, max_steps=1,
    )  # fmt: skip
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    rollout.close()
    after = trainer.model.parameters()
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))
    logged = [h for h in trainer.state.log_history if "credit/frac_episodes_zero_advantage" in h]
    assert len(logged) == 1


def test_train_command_credits_turns_and_records_it(tmp_path):
    import json

    import yaml
    from click.testing import CliRunner

    from trl_env.cli import cli

    out = tmp_path / "run"
    quick = ["--env", "guess", "--processor", "qwen3", "--processor-arg", "thinking=false"]
    quick += ["--max-new-tokens", "4", "--max-turns", "3", "--batch-size", "4"]
    quick += ["--num-generations", "2", "--train-seeds", "8", "--no-check", "--max-steps", "1"]
    result = CliRunner().invoke(
        cli, ["train", *quick, "--credit", "turn", "--output-dir", str(out), "--json"]
    )
    assert result.exit_code == 0, result.output
    assert yaml.safe_load((out / "config.yaml").read_text())["rollout"]["credit"] == "turn"
    assert json.loads((out / "summary.json").read_text())["credit"] == "turn"
    records = [json.loads(line) for line in (out / "episodes" / "rank0.jsonl").open()]
    assert records and all(len(r["turn_rewards"]) == r["turns"] for r in records)
    assert all(math.fsum(r["turn_rewards"]) == pytest.approx(r["reward"]) for r in records)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--credit", "turns"], "Invalid value for '--credit': 'turns' is not one of"),
        (["--config", "CONFIG"], "rollout.credit is 'step'; expected one of episode, turn."),
        (["--credit", "turn", "--async"], "--credit turn is not available with --async"),
    ],
)
def test_a_bad_credit_on_the_command_line_is_one_sentence(tmp_path, args, said):
    from click.testing import CliRunner

    from trl_env.cli import cli

    config = tmp_path / "c.yaml"
    config.write_text("rollout: {credit: step}\n")
    args = [str(config) if a == "CONFIG" else a for a in args]
    base = ["--env", "guess", "--processor", "qwen3", "--output-dir", str(tmp_path / "x")]
    result = CliRunner().invoke(cli, ["train", *base, *args])
    assert result.exit_code == 2, result.output
    line = result.output.strip().splitlines()[-1]
    assert said in line, result.output


def test_trl_compat_says_when_grpo_trainer_cannot_take_advantages_per_token():
    from trl import GRPOTrainer

    from trl_env.trl_compat import turn_credit_problem

    assert turn_credit_problem(GRPOTrainer) is None  # the installed TRL's

    class Older:  # a loss that would broadcast (B, T) advantages into (B, B, T)
        def _calculate_rewards(self): ...
        def _generate_and_score_completions(self): ...
        def _compute_loss(self, model, inputs):
            return inputs["advantages"].unsqueeze(1)

    said = turn_credit_problem(Older)
    assert said is not None and said.startswith("credit='turn' needs a GRPOTrainer loss that")
    del Older._calculate_rewards
    said = turn_credit_problem(Older)
    assert said is not None and "GRPOTrainer._calculate_rewards" in said

"""Credit per turn: TRL's ``GRPOTrainer`` with one advantage per token.

GRPO gives every token of an episode the advantage of the episode's reward. With
``credit="turn"`` (a rollout option: ``make_rollout_func(credit="turn")``, ``trl-env train
--credit turn``) each model turn's tokens get the advantage of the rewards from that turn on,
normalised within the GRPO group (:func:`turn_advantages`; docs/learning.md says why this way).

:class:`CreditGRPOTrainer` keeps TRL's whole step and loss: after TRL has scored a batch, it
replaces the ``(B,)`` advantages by ``(B, T)`` ones, which TRL's loss takes as they are (its
``_compute_loss`` unsqueezes only one-dimensional advantages). With ``credit="episode"`` it
changes nothing. A rollout function asks for turn credit with a ``credit`` attribute of
``"turn"``, and gives each episode's turns as ``env_turn_starts`` (where each model turn's tokens
start in ``completion_ids``) and ``env_turn_rewards`` (what each turn earned).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

import torch
from trl import GRPOTrainer

from ..config import Credit
from ..errors import UsageError
from ..trl_compat import turn_credit_problem

__all__ = ["EPSILON", "CreditGRPOTrainer", "credit_of", "returns_to_go", "turn_advantages"]

# TRL's: added to the standard deviation before dividing by it (``scale_rewards``).
EPSILON = 1e-4


def credit_of(rollout_func: Any) -> Credit:
    """The credit a rollout function asks for (its ``credit`` attribute; episode without one)."""
    value = getattr(rollout_func, "credit", None)
    return Credit(value) if value is not None else Credit.EPISODE


def returns_to_go(turn_rewards: Sequence[float], reward: float) -> list[float]:
    """Each turn's return to go, ``G_t = r_t + ... + r_T``, where the last turn's reward is what
    the others left of the episode's ``reward`` (the one GRPO scores), so ``G_1 = reward``."""
    if not turn_rewards:
        return []
    earned = [float(r) for r in turn_rewards[:-1]]
    rewards = [*earned, reward - math.fsum(earned)]
    out, total = [], 0.0
    for r in reversed(rewards):
        total += r
        out.append(total)
    out.reverse()
    out[0] = reward  # exact, whatever the float sums did
    return out


def turn_advantages(
    turn_rewards: Sequence[Sequence[float]],
    rewards: Sequence[float],
    group: int,
    scale: str = "group",
) -> list[list[float]]:
    """Each episode's advantage per turn, from its turns' rewards and its episode reward (NaN:
    not scored, every advantage 0), episodes in GRPO groups of ``group`` in a row.

    ``A[i][t] = (G[i][t] - mean(G[j][t] : j in the group with a turn t)) / (s + EPSILON)``,
    ``s`` the standard deviation (n - 1) of every return to go of the group's episodes, all
    turns pooled (``scale="group"``), of the whole batch's (``"batch"``); ``"none"``: no
    division. Episodes of one turn each give GRPO's own advantages.
    """
    if scale not in ("group", "batch", "none"):
        raise ValueError(f"scale_rewards must be group, batch or none, not {scale!r}")
    if len(turn_rewards) != len(rewards) or (group < 1 or len(rewards) % group):
        raise ValueError(f"{len(rewards)} episodes do not split into groups of {group}")
    returns = [
        returns_to_go(turns, reward) if math.isfinite(reward) else []
        for turns, reward in zip(turn_rewards, rewards, strict=True)
    ]
    residuals: list[list[float]] = []
    spreads: list[float] = []
    for g in range(0, len(returns), group):
        members = returns[g : g + group]
        longest = max((len(m) for m in members), default=0)
        baseline = [statistics.fmean(m[t] for m in members if len(m) > t) for t in range(longest)]
        residuals += [[m[t] - baseline[t] for t in range(len(m))] for m in members]
        spreads.append(_stdev([v for m in members for v in m]))
    if scale == "none":
        return residuals
    everyone = _stdev([v for m in returns for v in m])
    out = []
    for i, res in enumerate(residuals):
        s = spreads[i // group] if scale == "group" else everyone
        out.append([r / (s + EPSILON) for r in res])
    return out


def _stdev(values: list[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


def token_advantages(
    advantages: Sequence[Sequence[float]], starts: Sequence[Sequence[int]], width: int
) -> torch.Tensor:
    """``(B, width)``: each token gets the advantage of the turn it belongs to (a turn runs from
    its start to the next one's: its sampled ids, then the closer and env reply after them,
    which the loss masks); tokens before the first turn get 0."""
    out = torch.zeros(len(advantages), width, dtype=torch.float32)
    for i, (turns, begins) in enumerate(zip(advantages, starts, strict=True)):
        if not turns:
            continue
        for t, a in enumerate(turns):
            lo = begins[t]
            hi = begins[t + 1] if t + 1 < len(begins) else width
            out[i, lo:hi] = a
    return out


class CreditGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` that credits each model turn with the rewards from that turn on when its
    rollout function asks for it (``credit="turn"``); otherwise exactly ``GRPOTrainer``."""

    credits_turns = True  # read by trl_env's rollout function before its first batch

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._scored: torch.Tensor | None = None
        if self.credit is Credit.TURN:
            problem = turn_credit_problem(type(self))
            if problem is None and self.multi_objective_aggregation != "sum_then_normalize":
                problem = (
                    "credit='turn' needs multi_objective_aggregation='sum_then_normalize' (the "
                    "episode's reward is the weighted sum of the reward functions), not "
                    f"{self.multi_objective_aggregation!r}."
                )
            if problem is not None:
                raise UsageError(problem)

    @property
    def credit(self) -> Credit:
        return credit_of(getattr(self, "rollout_func", None))

    def _calculate_rewards(self, inputs: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        # every process's rewards of every function, as TRL scores the batch with them
        self._scored = super()._calculate_rewards(inputs, *args, **kwargs)
        return self._scored

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        self._scored = None
        out: dict[str, Any] = super()._generate_and_score_completions(inputs)
        if self.credit is Credit.TURN:
            out["advantages"] = self._per_token(inputs, out)
        return out

    def _per_token(self, inputs: list[dict[str, Any]], out: dict[str, Any]) -> torch.Tensor:
        """This process's ``(B, T)`` advantages; TRL has merged the rollout's columns into
        ``inputs`` (one row each) and scored every process's rows (``_calculate_rewards``)."""
        from accelerate.utils import gather_object

        if self._scored is None:
            raise RuntimeError("TRL scored no rewards before the advantages were computed")
        for key in ("env_turn_starts", "env_turn_rewards"):
            if key not in inputs[0]:
                raise UsageError(
                    f"credit='turn' needs the rollout function's {key} column (trl_env's "
                    "make_rollout_func gives it)."
                )
        weights = self.reward_weights.to(self._scored.device)
        weighted = (self._scored * weights.unsqueeze(0)).nansum(dim=1)
        weighted[torch.isnan(self._scored).all(dim=1)] = math.nan  # scored by no function
        rewards = [float(r) for r in weighted.tolist()]
        local = [[float(r) for r in x["env_turn_rewards"]] for x in inputs]
        everyone = local if self.accelerator.num_processes == 1 else gather_object(local)
        mode = "train" if getattr(self.model, "training", False) else "eval"
        group = (self.num_generations if mode == "train" else self.num_generations_eval) or 1
        # a bool from TRL releases before "group"/"batch"/"none"
        scale = str(self.scale_rewards)
        scale = {"True": "group", "False": "none"}.get(scale, scale)
        advantages = turn_advantages(everyone, rewards, group, scale)
        first = self.accelerator.process_index * len(inputs)
        mine = advantages[first : first + len(inputs)]
        ids = out["completion_ids"]
        per_token = token_advantages(mine, [x["env_turn_starts"] for x in inputs], ids.size(1))
        mask = out["completion_mask"] * out.get("tool_mask", 1)
        signal = [any(abs(a) > 0 for a in turns) for turns in advantages]
        self._metrics[mode]["credit/frac_episodes_zero_advantage"].append(
            1.0 - sum(signal) / max(1, len(signal))
        )
        return (per_token.to(ids.device) * mask).to(torch.float32)

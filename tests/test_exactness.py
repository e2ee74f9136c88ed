"""Exact off the default path: the trainer's sampling options, budgets, the model's own EOS ids.

Each test drives a real ``GRPOTrainer`` (or ``batch_rollout``) on the tiny qwen3 model and checks
ids and logprobs against an independent recomputation (TRL's own, where TRL computes one).
"""

from __future__ import annotations

import copy
import math

import pytest
import torch

from trl_env import make_rollout_func
from trl_env.errors import UsageError
from trl_env.rollout import batch_rollout
from trl_env.testing.toy_envs import WordEnv

pytestmark = pytest.mark.slow


def _trainer(grpo_trainer, rollout_func, **grpo):
    return grpo_trainer(rollout_func, [f"s{i}" for i in range(8)], **grpo)


def _trl_logprobs(trainer, prompt_ids, completion_ids) -> torch.Tensor:
    """TRL's own recomputation: log_softmax(logits / args.temperature) over the vocabulary."""
    ids = torch.tensor([prompt_ids + completion_ids])
    with torch.no_grad():
        logps, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, ids, torch.ones_like(ids), len(completion_ids)
        )
    return logps[0]


def test_rollout_func_samples_at_the_trainers_temperature(qwen3, grpo_trainer):
    rollout = make_rollout_func(env=WordEnv, processor=qwen3.processor, max_new_tokens=8)
    trainer = _trainer(grpo_trainer, rollout, temperature=0.7)
    out = rollout(["a", "a", "b", "b"], trainer)
    ratios = []
    for prompt, completion, logprobs, mask in zip(
        out["prompt_ids"], out["completion_ids"], out["logprobs"], out["env_mask"], strict=True
    ):
        theirs = _trl_logprobs(trainer, prompt, completion)
        ours = torch.tensor(logprobs)
        keep = torch.tensor(mask, dtype=torch.bool)
        ratios += torch.exp(theirs[keep] - ours[keep]).tolist()
    assert len(ratios) > 20
    assert max(abs(r - 1) for r in ratios) < 1e-4


def test_top_k_logprobs_are_the_processed_ones(qwen3, grpo_trainer):
    rollout = make_rollout_func(env=WordEnv, processor=qwen3.processor, max_new_tokens=8)
    trainer = _trainer(grpo_trainer, rollout, temperature=0.7, top_k=20)
    out = rollout(["a", "a", "b", "b"], trainer)
    checked = 0
    for prompt, completion, logprobs, mask in zip(
        out["prompt_ids"], out["completion_ids"], out["logprobs"], out["env_mask"], strict=True
    ):
        ids = torch.tensor([prompt + completion])
        with torch.no_grad():
            logits = trainer.model(ids).logits[0].float() / 0.7
        for j, (token, lp, m) in enumerate(zip(completion, logprobs, mask, strict=True)):
            if not m:
                continue
            row = logits[len(prompt) + j - 1]
            top = torch.topk(row, 20)
            assert token in top.indices.tolist()  # never outside the trainer's top 20
            expected = (row[token] - torch.logsumexp(top.values, -1)).item()
            assert lp == pytest.approx(expected, abs=1e-4)
            checked += 1
    assert checked > 20


def _kept_by_top_p(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Nucleus: the most likely tokens, in order, while the mass before each is below top_p."""
    order = torch.argsort(probs, descending=True)
    before = torch.cumsum(probs[order], 0) - probs[order]
    keep = torch.zeros_like(probs, dtype=torch.bool)
    keep[order[before < top_p]] = True
    return keep


def _kept_by_min_p(probs: torch.Tensor, min_p: float) -> torch.Tensor:
    return probs >= min_p * probs.max()


@pytest.mark.parametrize(
    ("option", "value", "kept"),
    [("top_p", 0.8, _kept_by_top_p), ("min_p", 0.3, _kept_by_min_p)],
)
def test_truncated_logprobs_are_the_truncated_distribution_s(
    qwen3, grpo_trainer, caplog, option, value, kept
):
    """Under top_p or min_p each sampled token lies in the kept set and its logprob is that of
    the kept set renormalized, not of the full softmax TRL recomputes; a TRL before 1.17, which
    scores tokens under the full one, gets one warning naming the bias."""
    import trl_env.trl_integration as glue

    glue._SAID.clear()
    rollout = make_rollout_func(env=WordEnv, processor=qwen3.processor, max_new_tokens=8)
    trainer = _trainer(grpo_trainer, rollout, temperature=0.7, **{option: value})
    with caplog.at_level("WARNING", logger="trl_env"):
        out = rollout(["a", "a", "b", "b"], trainer)
        rollout(["c", "c"], trainer)
    checked, below_full = 0, 0
    for prompt, completion, logprobs, mask in zip(
        out["prompt_ids"], out["completion_ids"], out["logprobs"], out["env_mask"], strict=True
    ):
        ids = torch.tensor([prompt + completion])
        with torch.no_grad():
            logits = trainer.model(ids).logits[0].float() / 0.7
        full = _trl_logprobs(trainer, prompt, completion)
        for j, (token, lp, m) in enumerate(zip(completion, logprobs, mask, strict=True)):
            if not m:
                continue
            row = logits[len(prompt) + j - 1]
            keep = kept(torch.softmax(row, -1), value)
            assert keep[token]  # never outside the kept set
            expected = (row[token] - torch.logsumexp(row[keep], -1)).item()
            assert lp == pytest.approx(expected, abs=1e-4)
            below_full += full[j].item() < lp - 1e-6  # the ratio TRL 1.16 takes is below 1
            checked += 1
    assert checked > 20 and below_full > 0
    from trl_env.trl_compat import installed_trl, truncation_bias

    said = [r.getMessage() for r in caplog.records if "truncated distribution" in r.getMessage()]
    expected_warning = truncation_bias(installed_trl(), {option: value})
    assert said == ([expected_warning] if expected_warning else [])
    if expected_warning:
        assert f"{option}={value}" in said[0] and "biased" in said[0] and "6789" in said[0]


def test_the_truncation_warning_follows_trl_s_version():
    from trl_env.trl_compat import truncation_bias

    assert truncation_bias("1.16.0", {"top_p": 0.9, "top_k": 0, "min_p": 0.0}) is not None
    assert truncation_bias("1.14.2", {"top_k": 20}) is not None
    assert truncation_bias("1.17.0", {"top_p": 0.9, "top_k": 20, "min_p": 0.1}) is None
    assert truncation_bias("1.16.0", {"top_p": 1.0, "top_k": 0, "min_p": 0.0}) is None
    both = truncation_bias("1.16.0", {"top_p": 0.9, "min_p": 0.1})
    assert both is not None and "top_p=0.9 and min_p=0.1" in both


def test_disagreeing_sampling_options_are_refused(qwen3, grpo_trainer):
    rollout = make_rollout_func(
        env=WordEnv, processor=qwen3.processor, max_new_tokens=4, temperature=0.9
    )
    trainer = _trainer(grpo_trainer, rollout, temperature=0.7)
    with pytest.raises(UsageError, match=r"temperature=0\.9.*temperature=0\.7"):
        rollout(["a"], trainer)


class LongPromptEnv(WordEnv):
    def reset(self, seed: str) -> str:
        return "tell me more " * 200


def test_nothing_reaches_the_trainer_past_the_budget(qwen3, grpo_trainer):
    budget = 64
    rollout = make_rollout_func(
        env=LongPromptEnv,
        processor=qwen3.processor,
        max_new_tokens=8,
        max_episode_tokens=budget,
    )
    trainer = _trainer(grpo_trainer, rollout)
    out = rollout(["a", "b"], trainer)
    assert out["env_status"] == ["budget", "budget"]
    for prompt, completion, mask in zip(
        out["prompt_ids"], out["completion_ids"], out["env_mask"], strict=True
    ):
        assert len(prompt) + len(completion) <= budget
        assert sum(mask) == 0  # nothing of it is trained on


def test_budget_holds_over_random_lengths(qwen3):
    """Short envs, tight budgets: prompt + completion never exceeds the budget."""
    for budget in (40, 57, 80, 123):
        episodes = qwen3.play(
            [f"b{budget}-{i}" for i in range(6)],
            WordEnv,
            max_new_tokens=16,
            max_episode_tokens=budget,
            seed=budget,
        )
        for ep in episodes:
            assert len(ep.prompt_ids) + len(ep.completion_ids) <= budget
            assert ep.status in ("done", "budget")


def test_the_models_own_eos_ends_a_turn_and_is_closed(qwen3):
    """A model that always writes <|endoftext|>: each turn is that one token plus the closer."""
    tok = qwen3.tokenizer
    eos = tok.convert_tokens_to_ids("<|endoftext|>")
    close = tok.convert_tokens_to_ids("<|im_end|>")
    assert isinstance(eos, int) and eos != close
    model = copy.deepcopy(qwen3.model)
    head = torch.nn.Linear(model.lm_head.in_features, model.lm_head.out_features, bias=True)
    with torch.no_grad():
        head.weight.zero_()
        head.bias.zero_()
        head.bias[eos] = 50.0
    model.lm_head = head
    model.generation_config.eos_token_id = [close, eos]
    (ep,) = batch_rollout(
        ["e"],
        env=WordEnv,
        processor=qwen3.processor,
        tokenizer=tok,
        model=model,
        max_new_tokens=10,
    )
    assert ep.status == "done" and ep.turns == 3
    model_tokens = [t for t, m in zip(ep.completion_ids, ep.env_mask, strict=True) if m]
    assert model_tokens == [eos] * 3  # the model wrote past nothing
    for i, m in enumerate(ep.env_mask):
        if m:
            assert ep.completion_ids[i + 1] == close and ep.env_mask[i + 1] == 0
    assert all(math.isfinite(lp) for lp in ep.logprobs)


def test_process_isolation_keeps_one_pool_across_batches(qwen3, grpo_trainer):
    rollout = make_rollout_func(
        env="guess", processor=qwen3.processor, max_new_tokens=4, env_isolation="process"
    )
    trainer = _trainer(grpo_trainer, rollout)
    first = rollout(["a", "a", "b", "b"], trainer)
    second = rollout(["c", "c", "d", "d"], trainer)
    assert all(
        s in ("done", "max_turns", "budget") for s in first["env_status"] + second["env_status"]
    )
    (host,) = rollout.hosts.values()  # one process pool for the run
    pool = host.pool
    assert pool.workers_started <= 4  # the second batch reused the first batch's workers
    rollout.close()
    assert pool.live_workers == 0

"""Fidelity benchmark: how exact are the episodes, per processor family, on its tiny model?

    .venv/bin/python bench/fidelity.py [--episodes N] [--temperature T] [--top-k K] [--json]

For each family it plays ``--episodes`` multi-turn episodes with ``batch_rollout`` (an env whose
replies hold newlines, blank lines and runs of spaces, as real observations do) and prints:

- the largest absolute difference between a sampled token's logprob and the processed logprob
  recomputed alone (one forward pass over the whole episode, temperature and top-k applied);
- bridge mismatches and non-canonical turns per 100 episodes (what a re-tokenizing pipeline
  would get wrong; trl-env itself never re-tokenizes);
- the mean on-policy ratio TRL would see: exp(full-vocabulary log-softmax at the temperature
  minus the reported logprob), which is exactly 1 without top-k/top-p.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import time

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

FAMILIES = ("qwen3", "qwen2.5", "llama3.1", "gemma2", "gemma3", "phi3.5")


class Observations:
    """Three turns of text shaped like real observations (blank lines, indentation)."""

    def __init__(self) -> None:
        self.reward, self.alive, self.n, self.rng = 0.0, True, 0, random.Random(0)

    def reset(self, seed: str) -> str:
        self.rng = random.Random(seed)
        return f"Board {seed}:\n\n#####\n#@ $#\n#####\n\nYour move?"

    def step(self, action: str) -> str:
        self.n += 1
        self.reward, self.alive = self.n / 3, self.n < 3
        rows = "\n".join("  " * self.rng.randint(0, 3) + f"row {i}" for i in range(3))
        return f"\n\nYou wrote {len(action)} characters.\n\n{rows}\n\n\n  Next?"


def measure(name: str, episodes: int, temperature: float, top_k: int) -> dict[str, float]:
    import torch

    from trl_env.models import load_model
    from trl_env.resolve import resolve_stack
    from trl_env.rollout import batch_rollout

    stack = resolve_stack(name, {}, "tiny", check=False)
    model = load_model(stack.model_path)
    played = batch_rollout(
        [f"{name}-{i}" for i in range(episodes)],
        env=Observations,
        processor=stack.processor,
        tokenizer=stack.tokenizer,
        model=model,
        max_new_tokens=24,
        temperature=temperature,
        top_k=top_k,
        seed=0,
    )
    worst, ratios = 0.0, []
    for ep in played:
        ids = torch.tensor([ep.prompt_ids + ep.completion_ids])
        with torch.no_grad():
            logits = model(ids).logits[0].float() / temperature
        start = len(ep.prompt_ids)
        for j, (token, lp, sampled) in enumerate(
            zip(ep.completion_ids, ep.logprobs, ep.env_mask, strict=True)
        ):
            if not sampled:
                continue
            row = logits[start + j - 1]
            kept = torch.topk(row, top_k).values if top_k else row
            worst = max(worst, abs(lp - (row[token] - torch.logsumexp(kept, -1)).item()))
            full = (row[token] - torch.logsumexp(row, -1)).item()
            ratios.append(math.exp(full - lp))
    return {
        "episodes": len(played),
        "max_logprob_error": worst,
        "bridge_mismatches_per_100": 100 * sum(e.bridge_mismatches for e in played) / len(played),
        "noncanonical_turns_per_100": 100 * sum(e.noncanonical_turns for e in played) / len(played),
        "mean_on_policy_ratio": statistics.fmean(ratios) if ratios else float("nan"),
        "tokens_checked": len(ratios),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--top-k", type=int, default=0)
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    start = time.perf_counter()
    results = {
        name: measure(name, args.episodes, args.temperature, args.top_k)
        for name in args.families.split(",")
    }
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(
        f"temperature {args.temperature}, top-k {args.top_k or 'off'}, "
        f"{args.episodes} episodes per family, {time.perf_counter() - start:.0f} s"
    )
    print(f"{'family':10} {'max |dlogp|':>12} {'bridge/100':>11} {'noncanon/100':>13} {'ratio':>8}")
    for name, r in results.items():
        print(
            f"{name:10} {r['max_logprob_error']:12.2e} {r['bridge_mismatches_per_100']:11.1f} "
            f"{r['noncanonical_turns_per_100']:13.1f} {r['mean_on_policy_ratio']:8.5f}"
        )


if __name__ == "__main__":
    main()

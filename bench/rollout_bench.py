"""Rollout engine benchmark: ratios measured in one run, on the qwen3 tiny model on CPU.

    .venv/bin/python bench/rollout_bench.py [--quick] [--json] [--threads N] [--repeats N]

Every figure is a ratio of two timings taken next to each other in the same process; each is
repeated (``--repeats``) and the median ratio is reported, so the machine's speed and load cancel
out as far as they can (see ``Timings``):

1. throughput: generated tokens/s of ``batch_rollout`` (N episodes, 6 turns of 16 tokens) over
   that of one ``model.generate`` call sampling the same tokens (same batch, the episodes' first
   prompts left padded, ``max_new_tokens = min_new_tokens = 6 * 16``, plain sampling);
2. long episodes: wall time of 16-turn episodes over 8-turn episodes;
3. batching: playing the episodes one at a time (``batch_rollout`` per seed) over all at once;
4. slow envs: with every env step sleeping 50 ms, the wall time per turn spent waiting for the
   environments (the engine's env phase, timed around its concurrent calls), over one step's
   latency; cross-checked by (time with 50 ms envs - time with 0 ms envs) / turns;
5. informative: throughput with a wordier env (more inserted tokens to prefill per turn), and
   context reuse: tokens prefilled per row per turn against the history length.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

# A guessing game's reply; with the chat template around it, 15 tokens are inserted per turn.
SHORT_REPLY = "Too high."
# A wordier reply (25 inserted tokens per turn), for the informational throughput row.
WORDY_REPLY = "Turn {n} noted. Go on."

TARGETS = {
    "throughput_ratio": (">=", 0.85),
    "turns16_over_turns8": ("<=", 2.3),
    "batch_speedup": (">=", 5.0),
    "env_wait_over_step": ("<", 2.0),
}


# -- the environment ----------------------------------------------------------------------------
class FixedEnv:
    """Lasts exactly ``turns`` steps whatever the model says, with same-length prompts and replies.

    The first prompt has the same number of tokens for every seed (so ``generate`` gets the same
    prompts as the episodes); every reply is ``reply`` (``{n}`` is the turn number), and every
    step may sleep ``delay`` seconds to stand in for a slow or remote environment.
    """

    def __init__(self, turns: int, delay: float = 0.0, reply: str = SHORT_REPLY) -> None:
        self.turns, self.delay, self.reply = turns, delay, reply
        self.n, self.alive, self.reward = 0, True, 0.0

    def reset(self, seed: str) -> str:
        self.n, self.alive, self.reward = 0, True, 0.0
        return "Play a short game. Answer in a few words each turn."

    def step(self, action: str) -> str:
        if self.delay:
            time.sleep(self.delay)
        self.n += 1
        self.reward = self.n / self.turns
        self.alive = self.n < self.turns
        return self.reply.format(n=self.n)


# -- instrumentation ----------------------------------------------------------------------------
@dataclass
class EnvPhase:
    """Wall time of the engine's env-step phases (each a batch of concurrent ``env.step`` calls)."""

    seconds: float = 0.0
    turns: int = 0


@contextlib.contextmanager
def timing_env_steps() -> Iterator[EnvPhase]:
    """Time each concurrent batch of ``env.step`` calls inside ``batch_rollout``.

    The engine runs every env call through ``trl_env.rollout.call_all``; only the batches issued
    by ``_step`` (one per turn) are counted, not creation, reset or close.
    """
    from trl_env import rollout

    phase = EnvPhase()
    inner_call_all, inner_step = rollout.call_all, rollout._step
    in_step = False

    def call_all(calls: Any, timeout: Any) -> Any:
        if not in_step:
            return inner_call_all(calls, timeout)
        start = time.perf_counter()
        try:
            return inner_call_all(calls, timeout)
        finally:
            phase.seconds += time.perf_counter() - start
            phase.turns += 1

    def step(*args: Any, **kwargs: Any) -> Any:
        nonlocal in_step
        in_step = True
        try:
            return inner_step(*args, **kwargs)
        finally:
            in_step = False

    rollout.call_all, rollout._step = call_all, step
    try:
        yield phase
    finally:
        rollout.call_all, rollout._step = inner_call_all, inner_step


def recording_backend(model: Any, pad_token_id: int) -> Any:
    """A transformers backend that records, per turn, the tokens prefilled and the history."""
    from trl_env.backends.transformers import TransformersBackend, TransformersSession

    class Session(TransformersSession):
        log: list[tuple[float, float]]

        def _prefill(self, chunks: list[list[int]]) -> Any:
            history = self.positions.float().mean().item() if len(self.positions) else 0.0
            self.log.append((history, statistics.fmean(len(c) for c in chunks)))
            return super()._prefill(chunks)

    class Backend(TransformersBackend):
        def __init__(self) -> None:
            super().__init__(model, pad_token_id)
            self.log: list[tuple[float, float]] = []

        def session(self, params: Any) -> Any:
            session = Session(self.model, self.pad_token_id, params)
            session.log = self.log
            return session

    return Backend()


# -- the measurements ---------------------------------------------------------------------------
@dataclass
class Stack:
    processor: Any
    tokenizer: Any
    model: Any


def load_stack() -> Stack:
    from trl_env.models import load_model
    from trl_env.resolve import resolve_stack

    stack = resolve_stack("qwen3", {}, "tiny", check=False)
    return Stack(stack.processor, stack.tokenizer, load_model(stack.model_path))


def play(
    stack: Stack,
    seeds: list[str],
    turns: int,
    turn_tokens: int,
    delay: float = 0.0,
    reply: str = SHORT_REPLY,
    backend: Any = None,
    seed: int = 0,
) -> list[Any]:
    """``batch_rollout`` of ``seeds`` on FixedEnv; returns the episodes."""
    from trl_env.rollout import batch_rollout

    return batch_rollout(
        seeds,
        env=lambda: FixedEnv(turns, delay, reply),
        processor=stack.processor,
        tokenizer=stack.tokenizer,
        model=None if backend is not None else stack.model,
        backend=backend,
        max_turns=turns,
        max_new_tokens=turn_tokens,
        max_episode_tokens=1 << 20,
        seed=seed,
    )


def generate_same(stack: Stack, prompts: list[list[int]], new_tokens: int) -> int:
    """One ``model.generate`` call on ``prompts`` (left padded); returns the tokens sampled."""
    import torch

    pad = stack.tokenizer.pad_token_id
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    with torch.no_grad():
        out = stack.model.generate(
            input_ids=ids,
            attention_mask=mask,
            do_sample=True,
            temperature=1.0,
            top_k=0,  # plain sampling from the model's distribution, as the rollout does
            top_p=1.0,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            pad_token_id=pad,
        )
    return (out.shape[1] - width) * out.shape[0]


def sampled(episodes: list[Any]) -> int:
    return sum(ep.sampled_tokens for ep in episodes)


def inserted_per_turn(episodes: list[Any]) -> float:
    """Tokens inserted after the first prompt per turn: env reply, template, turn closer."""
    return sum(ep.inserted_tokens for ep in episodes) / max(1, sum(ep.turns for ep in episodes))


class Timings:
    """Wall and CPU seconds of each measurement, one per repeat (and tokens sampled, if given).

    Each figure is the median over repeats of the ratio of two measurements taken next to each
    other in the same repeat. On a shared machine slow spells tend to last longer than a repeat,
    so neighbours see similar conditions and their ratio is steadier than either time (see
    docs/benchmarks.md for how much). CPU time (all threads of this process) is reported next to
    wall time as a check; the targets are judged on wall time.
    """

    def __init__(self) -> None:
        self.wall: dict[str, list[float]] = {}
        self.cpu: dict[str, list[float]] = {}
        self.tokens: dict[str, list[int]] = {}

    @contextlib.contextmanager
    def timing(self, name: str, scale: float = 1.0) -> Iterator[None]:
        wall, cpu = time.perf_counter(), time.process_time()
        yield
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        self.wall.setdefault(name, []).append(wall * scale)
        self.cpu.setdefault(name, []).append(cpu * scale)

    def count(self, name: str, tokens: int) -> None:
        self.tokens.setdefault(name, []).append(tokens)

    def ratio(self, a: str, b: str, cpu: bool = False) -> float:
        """Median over repeats of time(a) / time(b) (only repeats that measured both)."""
        times = self.cpu if cpu else self.wall
        return statistics.median(x / y for x, y in zip(times[a], times[b], strict=False))

    def speed_ratio(self, a: str, b: str, cpu: bool = False) -> float:
        """Median over repeats of tokens/s of a over tokens/s of b."""
        times = self.cpu if cpu else self.wall
        pairs = zip(times[a], self.tokens[a], times[b], self.tokens[b], strict=True)
        return statistics.median((na / ta) / (nb / tb) for ta, na, tb, nb in pairs)

    def median(self, name: str) -> float:
        return statistics.median(self.wall[name])


def run(
    stack: Stack | None = None,
    *,
    episodes: int = 32,
    turns: int = 6,
    turn_tokens: int = 16,
    short_turns: int = 8,
    long_turns: int = 16,
    delay: float = 0.05,
    sequential_episodes: int | None = None,
    repeats: int = 10,
) -> dict[str, Any]:
    """Measure every figure; returns a dict of numbers (seconds, tokens/s, ratios)."""
    import torch

    stack = stack or load_stack()
    seeds = [f"bench-{i}" for i in range(episodes)]
    seq_seeds = seeds[: sequential_episodes or episodes]
    play(stack, seeds[:4], 2, 4)  # warm up the model, tokenizer and worker threads

    t = Timings()
    env_waits: list[float] = []
    context: list[tuple[float, float]] = []
    # Every repeat measures everything once, neighbours that are compared next to each other.
    for r in range(repeats):
        with t.timing("rollout"):
            eps = play(stack, seeds, turns, turn_tokens, seed=r)
        # Tokens actually sampled: a row that samples its end-of-turn token early (rare on the
        # random tiny model) makes fewer tokens than generate's fixed count.
        t.count("rollout", sampled(eps))
        with t.timing("generate"):
            t.count(
                "generate", generate_same(stack, [ep.prompt_ids for ep in eps], turns * turn_tokens)
            )
        with t.timing("wordy"):
            wordy = play(stack, seeds, turns, turn_tokens, reply=WORDY_REPLY, seed=r)
        t.count("wordy", sampled(wordy))
        for _ in range(2):  # the noisiest ratio on a shared machine: twice the samples
            with t.timing("short"):
                play(stack, seeds, short_turns, turn_tokens, seed=r)
            with t.timing("long"):
                play(stack, seeds, long_turns, turn_tokens, seed=r)
        with timing_env_steps() as phase, t.timing("slow_envs"):
            play(stack, seeds, turns, turn_tokens, delay=delay, seed=r)
        env_waits.append(phase.seconds / max(phase.turns, 1))
        if r == 0:  # one at a time is long: once is enough for a >= 5x target
            with t.timing("sequential", scale=len(seeds) / len(seq_seeds)):
                for s in seq_seeds:
                    play(stack, [s], turns, turn_tokens, seed=r)
            backend = recording_backend(stack.model, stack.tokenizer.pad_token_id)
            play(stack, seeds, turns, turn_tokens, backend=backend, seed=r)
            context = backend.log

    env_wait = statistics.median(env_waits)
    slow_minus_fast = statistics.median(
        (slow - fast) / turns
        for slow, fast in zip(t.wall["slow_envs"], t.wall["rollout"], strict=True)
    )
    return {
        "episodes": episodes,
        "turns": turns,
        "turn_tokens": turn_tokens,
        "repeats": repeats,
        "threads": torch.get_num_threads(),
        "median_wall_seconds": {name: t.median(name) for name in t.wall},
        "per_repeat": {"wall": t.wall, "cpu": t.cpu, "tokens": t.tokens, "env_wait": env_waits},
        "rollout_tokens": statistics.median(t.tokens["rollout"]),
        "rollout_tokens_per_s": statistics.median(
            n / s for n, s in zip(t.tokens["rollout"], t.wall["rollout"], strict=True)
        ),
        "generate_tokens": t.tokens["generate"][0],
        "generate_tokens_per_s": t.tokens["generate"][0] / t.median("generate"),
        "inserted_per_turn": inserted_per_turn(eps),
        "throughput_ratio": t.speed_ratio("rollout", "generate"),
        "throughput_ratio_cpu": t.speed_ratio("rollout", "generate", cpu=True),
        "wordy_inserted_per_turn": inserted_per_turn(wordy),
        "wordy_throughput_ratio": t.speed_ratio("wordy", "generate"),
        "wordy_throughput_ratio_cpu": t.speed_ratio("wordy", "generate", cpu=True),
        "short_turns": short_turns,
        "long_turns": long_turns,
        "turns16_over_turns8": t.ratio("long", "short"),
        "turns16_over_turns8_cpu": t.ratio("long", "short", cpu=True),
        "sequential_episodes_played": len(seq_seeds),
        # Played once (it is long), over the median batched time.
        "batch_speedup": t.wall["sequential"][0] / statistics.median(t.wall["rollout"]),
        "batch_speedup_cpu": t.cpu["sequential"][0] / statistics.median(t.cpu["rollout"]),
        "step_delay_s": delay,
        "env_wait_per_turn_s": env_wait,
        "env_wait_over_step": env_wait / delay if delay else 0.0,
        "slow_minus_fast_per_turn_s": slow_minus_fast,
        "context": [
            {"turn": i + 1, "history_tokens": h, "prefilled_tokens": p}
            for i, (h, p) in enumerate(context)
        ],
    }


def verdicts(result: dict[str, Any]) -> dict[str, bool]:
    checks = {">=": lambda v, t: v >= t, "<=": lambda v, t: v <= t, "<": lambda v, t: v < t}
    return {key: checks[op](result[key], target) for key, (op, target) in TARGETS.items()}


def report(result: dict[str, Any]) -> str:
    r, ok = result, verdicts(result)
    wall = r["median_wall_seconds"]
    rows = [
        (
            f"throughput: rollout {r['rollout_tokens_per_s']:.0f} tok/s "
            f"({r['rollout_tokens']:.0f} tok, {r['inserted_per_turn']:.0f} inserted/turn) "
            f"/ generate {r['generate_tokens_per_s']:.0f} tok/s ({r['generate_tokens']} tok)",
            "throughput_ratio",
        ),
        (
            f"{r['long_turns']}-turn episodes {wall['long']:.2f}s / "
            f"{r['short_turns']}-turn {wall['short']:.2f}s",
            "turns16_over_turns8",
        ),
        (
            f"one at a time {wall['sequential']:.2f}s / all at once {wall['rollout']:.2f}s"
            + (
                f" (played {r['sequential_episodes_played']}, scaled)"
                if r["sequential_episodes_played"] != r["episodes"]
                else ""
            ),
            "batch_speedup",
        ),
        (
            f"env wait {1000 * r['env_wait_per_turn_s']:.1f} ms/turn / one step "
            f"{1000 * r['step_delay_s']:.0f} ms (total slow - fast: "
            f"{1000 * r['slow_minus_fast_per_turn_s']:.1f} ms/turn)",
            "env_wait_over_step",
        ),
    ]
    width = 92
    lines = [
        f"trl-env rollout bench: qwen3 tiny on CPU, torch {_torch_version()}, "
        f"{r['threads']} torch thread(s), {os.cpu_count()} cores; "
        f"medians of {r['repeats']} repeats",
        f"{r['episodes']} episodes x {r['turns']} turns x {r['turn_tokens']} tokens",
        "",
        f"{'figure':<{width}} {'wall':>6} {'cpu':>6}  {'target':<7} result",
    ]
    for text, key in rows:
        op, target = TARGETS[key]
        cpu = r.get(f"{key}_cpu")
        cpu_text = f"{cpu:>5.2f}x" if cpu is not None else f"{'-':>6}"
        verdict = "PASS" if ok[key] else "FAIL"
        lines.append(f"{text:<{width}} {r[key]:>5.2f}x {cpu_text}  {op} {target:<4} {verdict}")
    wordy = (
        f"info: throughput with a wordier env ({r['wordy_inserted_per_turn']:.0f} inserted/turn)"
    )
    lines.append(
        f"{wordy:<{width}} {r['wordy_throughput_ratio']:>5.2f}x "
        f"{r['wordy_throughput_ratio_cpu']:>5.2f}x  (no target)"
    )
    if r["context"]:
        lines += ["", "context reuse (mean per row): turn, history tokens, tokens prefilled"]
        lines += [
            f"  {c['turn']:>2}  {c['history_tokens']:>7.1f}  {c['prefilled_tokens']:>6.1f}"
            for c in r["context"]
        ]
    return "\n".join(lines)


def _torch_version() -> str:
    import torch

    return torch.__version__


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller run (indicative only)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--repeats", type=int, default=None, help="repeats (default 10, quick 2)")
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    sizes: dict[str, Any] = {"repeats": args.repeats or 10}
    if args.quick:
        sizes = {"episodes": 16, "sequential_episodes": 4, "repeats": args.repeats or 2}
    result = run(**sizes)
    result["passed"] = verdicts(result)
    result["machine"] = {
        "cores": os.cpu_count(),
        "torch": _torch_version(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    print(json.dumps(result, indent=2) if args.json else report(result))
    return 0 if all(result["passed"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())

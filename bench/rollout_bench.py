"""Rollout engine benchmark: ratios measured in one run, on the qwen3 tiny model on CPU.

    .venv/bin/python bench/rollout_bench.py [--quick] [--json] [--threads N] [--repeats N]
                                            [--slow-step SECONDS]

Every figure is a ratio of two timings taken next to each other in the same process; each is
repeated (``--repeats``) and the median ratio is reported, so the machine's speed and load cancel
out as far as they can (see ``Timings``):

1. throughput: generated tokens/s of ``batch_rollout`` (N episodes, 6 turns of 16 tokens) over
   that of one ``model.generate`` call sampling the same tokens (same batch, the episodes' first
   prompts left padded, ``max_new_tokens = min_new_tokens = 6 * 16``, plain sampling);
2. long episodes: wall time of 16-turn episodes over 8-turn episodes;
3. batching: playing the episodes one at a time (``batch_rollout`` per seed) over all at once;
4. slow envs: with every env step sleeping 50 ms, the extra wall time per turn over the same
   rollout with instant envs, over one step's latency (the env steps of a turn overlap);
5. a slow tail: 10% of the episodes have envs that take ``--slow-step`` seconds (1 s) per step;
   the time the last of the other (fast) episodes ends, over the wall time of the same batch
   with every env fast (the engine has no turn barrier, so fast episodes need not wait);
6. informative: the transformers backend alone (one session fed the rollout's first prompts
   and inserted text, sampling the same number of tokens) over ``model.generate``; throughput
   with a wordier env (more inserted tokens to prefill per turn); context reuse: tokens
   prefilled per row per generation call against the history length;
7. the other transformers engine: figures 1 and 5 are measured on the default engine
   (``trl_env.backends.transformers.DEFAULT_ENGINE``, for the CPU); the same two on the
   other one (``calls`` or ``continuous``) are reported beside them, with its tokens/s over
   the default's, measured next to each other.
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

from trl_env.testing.toy_envs import FixedTurnsEnv

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

# A guessing game's reply; with the chat template around it, 15 tokens are inserted per turn.
SHORT_REPLY = "Too high."
# A wordier reply (25 inserted tokens per turn), for the informational throughput row.
WORDY_REPLY = "Turn {n} noted. Go on."

TARGETS = {
    "throughput_ratio": (">=", 0.95),
    "turns16_over_turns8": ("<=", 2.3),
    "batch_speedup": (">=", 5.0),
    "env_wait_over_step": ("<", 2.0),
    "slow_tail_ratio": ("<=", 1.3),
}


# -- instrumentation ----------------------------------------------------------------------------
def recording_backend(model: Any, pad_token_id: int) -> Any:
    """A transformers backend that records, per generation call, the history and the prefill.

    Each entry is (mean tokens already held by the called rows, mean tokens prefilled for them:
    the last sampled token of the previous turn plus the text inserted since).
    """
    from trl_env.backends.transformers import TransformersBackend, TransformersSession

    class Session(TransformersSession):
        log: list[tuple[float, float]]

        def generate(self, turns: Any, stop_ids: Any) -> Any:
            slots = [self.slot_of.get(t.row) for t in turns]
            held = [0 if s is None else self.lengths[s] for s in slots]
            fed = [len(self.pending.get(t.row, [])) + len(t.new_ids) for t in turns]
            self.log.append((statistics.fmean(held), statistics.fmean(fed)))
            return super().generate(turns, stop_ids)

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
    delay: float | list[float] = 0.0,
    reply: str = SHORT_REPLY,
    backend: Any = None,
    seed: int = 0,
    on_episode: Any = None,
) -> list[Any]:
    """``batch_rollout`` of ``seeds`` on FixedTurnsEnv (``delay``: one for all, or one per seed)."""
    from trl_env.rollout import batch_rollout

    delays = delay if isinstance(delay, list) else [delay] * len(seeds)
    return batch_rollout(
        seeds,
        env=[FixedTurnsEnv(turns, d, reply) for d in delays],
        processor=stack.processor,
        tokenizer=stack.tokenizer,
        model=None if backend is not None else stack.model,
        backend=backend,
        max_turns=turns,
        max_new_tokens=turn_tokens,
        max_episode_tokens=1 << 20,
        seed=seed,
        on_episode=on_episode,
    )


def fast_finish(
    stack: Stack,
    seeds: list[str],
    turns: int,
    turn_tokens: int,
    slow: float,
    seed: int,
    backend: Any = None,
) -> float:
    """Seconds until every fast episode has ended, with every tenth episode's env ``slow``."""
    slow_seeds = set(seeds[::10])
    ended: dict[str, float] = {}
    start = time.perf_counter()
    play(
        stack,
        seeds,
        turns,
        turn_tokens,
        delay=[slow if s in slow_seeds else 0.0 for s in seeds],
        backend=backend,
        seed=seed,
        on_episode=lambda ep: ended.setdefault(ep.seed, time.perf_counter()),
    )
    return max(ended[s] for s in seeds if s not in slow_seeds) - start


@dataclass
class Engine:
    name: str
    backend: Any


def engines(stack: Stack) -> tuple[str, Engine]:
    """The transformers engine ``batch_rollout`` gets by default here, and the other one."""
    from trl_env.backends import BackendContext
    from trl_env.backends.transformers import default_engine, make_backend

    default = default_engine(stack.model)
    other = "continuous" if default == "calls" else "calls"
    options = {"engine": other}
    context = BackendContext(tokenizer=stack.tokenizer, model=stack.model, options=options)
    return default, Engine(other, make_backend(context))


def replay_backend(stack: Stack, episodes: list[Any], turn_tokens: int, seed: int) -> int:
    """The transformers backend alone, fed what the rollout inserted; returns tokens sampled.

    One session, one call per turn for every episode: the first prompt, then each piece of
    text inserted after a turn (env reply, closer), sampling as many tokens as that turn of the
    rollout sampled (no stop ids: the same token count). No environments, tokenizer or engine:
    what the decode loop costs by itself, the limit of the rollout on this backend.
    """
    from trl_env.backends.base import SamplingParams, Turn
    from trl_env.backends.transformers import TransformersBackend

    chunks = [[ep.prompt_ids, *inserted_pieces(ep)] for ep in episodes]
    lengths = [turn_lengths(ep) for ep in episodes]
    session = TransformersBackend(stack.model, stack.tokenizer.pad_token_id).session(
        SamplingParams(seed=seed)
    )
    made = 0
    for turn in range(max(len(c) for c in chunks)):
        turns = [
            Turn(i, c[turn], lengths[i][turn] if turn < len(lengths[i]) else turn_tokens)
            for i, c in enumerate(chunks)
            if turn < len(c)
        ]
        samples = session.generate(turns, frozenset())
        made += sum(len(s.ids) for s in samples)
    session.close()
    return made


def turn_lengths(episode: Any) -> list[int]:
    """The number of ids each of an episode's turns sampled (its runs of mask 1)."""
    runs: list[int] = []
    for i, by_model in enumerate(episode.env_mask):
        if by_model:
            if i == 0 or not episode.env_mask[i - 1]:
                runs.append(0)
            runs[-1] += 1
    return runs


def inserted_pieces(episode: Any) -> list[list[int]]:
    """The runs of inserted (masked) ids in an episode's completion that a turn follows."""
    pieces: list[list[int]] = []
    ids, mask = episode.completion_ids, episode.env_mask
    for i, (token, by_model) in enumerate(zip(ids, mask, strict=True)):
        if by_model:
            continue
        if i == 0 or mask[i - 1]:
            pieces.append([])
        pieces[-1].append(token)
    return pieces if mask and mask[-1] else pieces[:-1]  # text after the last turn: none sampled


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
    slow_step: float = 1.0,
    sequential_episodes: int | None = None,
    repeats: int = 10,
) -> dict[str, Any]:
    """Measure every figure; returns a dict of numbers (seconds, tokens/s, ratios)."""
    import torch

    stack = stack or load_stack()
    seeds = [f"bench-{i}" for i in range(episodes)]
    seq_seeds = seeds[: sequential_episodes or episodes]
    default, other = engines(stack)
    play(stack, seeds[:4], 2, 4)  # warm up the model, tokenizer and worker threads
    play(stack, seeds[:4], 2, 4, backend=other.backend)

    t = Timings()
    tails: list[float] = []
    other_tails: list[float] = []
    context: list[tuple[float, float]] = []
    # Every repeat measures everything once, neighbours that are compared next to each other.
    for r in range(repeats):
        with t.timing("rollout"):
            eps = play(stack, seeds, turns, turn_tokens, seed=r)
        # Tokens actually sampled: a row that samples its end-of-turn token early (rare on the
        # random tiny model) makes fewer tokens than generate's fixed count.
        t.count("rollout", sampled(eps))
        with t.timing("other"):
            t.count(
                "other",
                sampled(play(stack, seeds, turns, turn_tokens, backend=other.backend, seed=r)),
            )
        with t.timing("generate"):
            t.count(
                "generate", generate_same(stack, [ep.prompt_ids for ep in eps], turns * turn_tokens)
            )
        with t.timing("backend"):
            t.count("backend", replay_backend(stack, eps, turn_tokens, r))
        with t.timing("wordy"):
            wordy = play(stack, seeds, turns, turn_tokens, reply=WORDY_REPLY, seed=r)
        t.count("wordy", sampled(wordy))
        for _ in range(2):  # the noisiest ratio on a shared machine: twice the samples
            with t.timing("short"):
                play(stack, seeds, short_turns, turn_tokens, seed=r)
            with t.timing("long"):
                play(stack, seeds, long_turns, turn_tokens, seed=r)
        with t.timing("slow_envs"):
            play(stack, seeds, turns, turn_tokens, delay=delay, seed=r)
        if r < 3:  # each takes turns x slow_step seconds: three are enough
            tails.append(fast_finish(stack, seeds, turns, turn_tokens, slow_step, r))
            tails[-1] /= t.wall["rollout"][-1]
            other_tails.append(
                fast_finish(stack, seeds, turns, turn_tokens, slow_step, r, other.backend)
                / t.wall["other"][-1]
            )
        if r == 0:  # one at a time is long: once is enough for a >= 5x target
            with t.timing("sequential", scale=len(seeds) / len(seq_seeds)):
                for s in seq_seeds:
                    play(stack, [s], turns, turn_tokens, seed=r)
            backend = recording_backend(stack.model, stack.tokenizer.pad_token_id)
            play(stack, seeds, turns, turn_tokens, backend=backend, seed=r)
            context = backend.log

    # What slow envs add to each turn: the steps of a turn overlap, so about one step's latency.
    env_wait = statistics.median(
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
        "per_repeat": {
            "wall": t.wall,
            "cpu": t.cpu,
            "tokens": t.tokens,
            "slow_tail": tails,
            "other_slow_tail": other_tails,
        },
        "rollout_tokens": statistics.median(t.tokens["rollout"]),
        "rollout_tokens_per_s": statistics.median(
            n / s for n, s in zip(t.tokens["rollout"], t.wall["rollout"], strict=True)
        ),
        "generate_tokens": t.tokens["generate"][0],
        "generate_tokens_per_s": t.tokens["generate"][0] / t.median("generate"),
        "inserted_per_turn": inserted_per_turn(eps),
        "throughput_ratio": t.speed_ratio("rollout", "generate"),
        "throughput_ratio_cpu": t.speed_ratio("rollout", "generate", cpu=True),
        "backend_throughput_ratio": t.speed_ratio("backend", "generate"),
        "backend_throughput_ratio_cpu": t.speed_ratio("backend", "generate", cpu=True),
        # The limit for this engine: the backend alone replaying the rollout's own requests.
        "replay_tokens": statistics.median(t.tokens["backend"]),
        "replay_tokens_per_s": statistics.median(
            n / s for n, s in zip(t.tokens["backend"], t.wall["backend"], strict=True)
        ),
        "rollout_over_replay": t.speed_ratio("rollout", "backend"),
        "rollout_over_replay_cpu": t.speed_ratio("rollout", "backend", cpu=True),
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
        "slow_step_s": slow_step,
        "slow_tail_ratio": statistics.median(tails),
        "engine": default,
        "other_engine": other.name,
        "other_throughput_ratio": t.speed_ratio("other", "generate"),
        "other_throughput_ratio_cpu": t.speed_ratio("other", "generate", cpu=True),
        "other_over_default": t.speed_ratio("other", "rollout"),
        "other_over_default_cpu": t.speed_ratio("other", "rollout", cpu=True),
        "other_slow_tail_ratio": statistics.median(other_tails),
        "context": [
            {"call": i + 1, "history_tokens": h, "prefilled_tokens": p}
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
            f"slow envs: each step {1000 * r['step_delay_s']:.0f} ms adds "
            f"{1000 * r['env_wait_per_turn_s']:.1f} ms per turn, over one step",
            "env_wait_over_step",
        ),
        (
            f"slow tail: 10% of envs take {r['slow_step_s']:g} s a step; fast episodes end "
            f"{wall['rollout'] * r['slow_tail_ratio']:.2f}s / all fast {wall['rollout']:.2f}s",
            "slow_tail_ratio",
        ),
    ]
    width = 92
    lines = [
        f"trl-env rollout bench: qwen3 tiny on CPU ({r['engine']} engine), "
        f"torch {_torch_version()}, {r['threads']} torch thread(s), {os.cpu_count()} cores; "
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
    backend = "info: the transformers backend alone, replaying the rollout's text, / generate"
    lines.append(
        f"{backend:<{width}} {r['backend_throughput_ratio']:>5.2f}x "
        f"{r['backend_throughput_ratio_cpu']:>5.2f}x  (no target)"
    )
    replay = "info: rollout / the transformers backend alone replaying its requests"
    lines.append(
        f"{replay:<{width}} {r['rollout_over_replay']:>5.2f}x "
        f"{r['rollout_over_replay_cpu']:>5.2f}x  (no target)"
    )
    other = r["other_engine"]
    for text, key in (
        (f"info: the {other} engine: rollout / generate", "other_throughput_ratio"),
        (f"info: the {other} engine's tokens/s / the {r['engine']} engine's", "other_over_default"),
    ):
        lines.append(f"{text:<{width}} {r[key]:>5.2f}x {r[key + '_cpu']:>5.2f}x  (no target)")
    tail = f"info: the {other} engine's slow tail (as above)"
    lines.append(f"{tail:<{width}} {r['other_slow_tail_ratio']:>5.2f}x {'-':>6}  (no target)")
    wordy = (
        f"info: throughput with a wordier env ({r['wordy_inserted_per_turn']:.0f} inserted/turn)"
    )
    lines.append(
        f"{wordy:<{width}} {r['wordy_throughput_ratio']:>5.2f}x "
        f"{r['wordy_throughput_ratio_cpu']:>5.2f}x  (no target)"
    )
    if r["context"]:
        lines += ["", "context reuse (mean per row): call, history tokens, tokens prefilled"]
        lines += [
            f"  {c['call']:>2}  {c['history_tokens']:>7.1f}  {c['prefilled_tokens']:>6.1f}"
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
    parser.add_argument(
        "--strict", action="store_true", help="exit 1 when a target is missed (default: report it)"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--repeats", type=int, default=None, help="repeats (default 10, quick 2)")
    parser.add_argument(
        "--slow-step", type=float, default=None, help="slow envs' step seconds (1, quick 0.3)"
    )
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    sizes: dict[str, Any] = {"repeats": args.repeats or 10, "slow_step": args.slow_step or 1.0}
    if args.quick:
        sizes = {
            "episodes": 16,
            "sequential_episodes": 4,
            "repeats": args.repeats or 2,
            "slow_step": args.slow_step or 0.3,
        }
    result = run(**sizes)
    result["passed"] = verdicts(result)
    result["machine"] = {
        "cores": os.cpu_count(),
        "torch": _torch_version(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    print(json.dumps(result, indent=2) if args.json else report(result))
    return 0 if all(result["passed"].values()) or not args.strict else 1


if __name__ == "__main__":
    sys.exit(main())

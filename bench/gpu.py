"""GPU benchmark of the rollout engine, one command on any CUDA machine:

    python bench/gpu.py                          # full run: Qwen3-0.6B shape, bf16, CUDA
    python bench/gpu.py --device cpu --quick     # a smoke run with tiny shapes (CI)

No network: the model is a Qwen3-0.6B-shaped config with random weights, built on the device,
and the tokenizer and chat format are the built-in tiny qwen3 ones (token ids the tiny
vocabulary cannot name decode to nothing, which no env here reads). Every figure is measured in
this run, and each comparison is two timings taken one after the other:

1. throughput: generated tokens/s of ``batch_rollout`` (N episodes of T turns of K tokens) on
   each transformers engine (``continuous``: rows join and leave a running decode loop whose
   steps are CUDA graphs; ``calls``: a batch of ready rows per call) against one
   ``model.generate`` call sampling as many tokens per episode from the same prompt, a ragged
   ``generate`` and transformers' own continuous batching (``generate_batch``, default
   settings) on the same requests; beside each, the physical limit: the tokens/s at which the
   bytes the steps must read (weights once a step, each row's KV cache) stream at the memory
   bandwidth measured here;
2. batching: the same episodes played one at a time over all at once (``--engine``);
3. slow envs: 10% of the envs take ``--slow-delay`` s per step; the time by which the fast
   episodes have finished, over that time in a batch where every env is fast (each engine);
4. a GRPO step (``GRPOTrainer`` with trl-env's ``rollout_func`` on ``--engine``), split into
   rollout and update (everything else in the step);
5. where vllm is installed: a rollout through the vllm backend against ``vllm serve`` on the
   same weights, over a minimal client replaying the rollout's own requests (bench/replay.py:
   the limit of a multi-turn client) and over one completions request generating the same
   number of tokens (``--vllm-url URL`` measures a server already running instead);
6. with ``--async`` (and vllm): TRL's ``AsyncGRPOTrainer`` fed by trl-env's
   ``EnvRolloutWorker`` against ``vllm serve``, and the share of each step the trainer waits for
   samples, beside the rollout's share of a synchronous GRPO step on the same model and env.
   One GPU holds both the server and the trainer, and NCCL cannot join two processes on one
   device, so the weights are not streamed to the server here (a no-op weight transfer): the
   samples grow staler, the timings are those of a real async run.

It prints a table and writes every figure, the command and the machine to ``--out`` (JSON).

    python bench/gpu.py --all --json             # every section at sizes that fit ~8 minutes

``--all`` runs every section (``--async`` included) at the ``ALL`` sizes, meant to fit 8
minutes on one GPU with ``bench/gpu_lent.sh``'s install, and adds ``summary``: rollout over
replay through vLLM, rollout over ``model.generate`` and over ``generate_batch``, the GRPO
step's rollout share, and the async worker's samples/s over a synchronous GRPO step's.
``--json`` prints the JSON instead of the table. The JSON records the run's own wall time
(``seconds``) and the device.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.util
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from replay import replay, requests_of  # bench/replay.py: the minimal vLLM client

from trl_env.testing.toy_envs import FixedTurnsEnv

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

# Qwen3-0.6B's shape (its config.json), over the tiny qwen3 config's token ids.
QWEN3_0_6B = {
    "hidden_size": 1024,
    "intermediate_size": 3072,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "rope_theta": 1_000_000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
}


@dataclass(frozen=True)
class Shape:
    """The sizes of one benchmark run."""

    episodes: tuple[int, ...] = (16, 64, 256)
    turns: tuple[int, ...] = (4, 8, 16)
    tokens: int = 32  # per turn
    throughput_pairs: int = 3  # continuous rollout and generate, first in turn: median counts
    calls_pairs: int = 3  # of those, the ones that also measure the calls engine
    # the slower references, in the first pair only: ragged generate, generate_batch
    references: tuple[str, ...] = ("ragged", "generate_batch")
    batching: tuple[int, int] = (16, 4)  # episodes, turns
    slow: tuple[int, int] = (64, 8)  # episodes, turns
    slow_delay: float = 1.0
    slow_pairs: int = 3  # a GPU's step time varies from call to call: the median pair counts
    grpo: tuple[int, int, int] = (32, 8, 4)  # episodes, group size, turns
    grpo_steps: int = 2  # the last one is reported: the first pays for warm-up
    vllm: tuple[tuple[int, ...], int] = ((64, 256), 8)  # episodes, turns


QUICK = Shape(
    episodes=(2, 4),
    turns=(2,),
    tokens=4,
    throughput_pairs=2,
    calls_pairs=2,
    batching=(3, 2),
    slow=(10, 2),
    slow_delay=0.2,
    slow_pairs=1,
    grpo=(4, 2, 2),
    grpo_steps=2,
    vllm=((4,), 2),
)


# Every section in one command of about 8 minutes on one GPU with gpu_lent.sh's install: the
# slow sides (generate, the calls engine, the references) take 9-30 s each on an H200, so the
# calls engine runs in one pair and the references once per size. Otherwise the default sizes.
ALL = Shape(episodes=(64, 256), turns=(8,), calls_pairs=1, slow=(64, 4))


# -- the environment --------------------------------------------------------------------
class BenchEnv(FixedTurnsEnv):
    """``turns`` steps whatever the model writes; each step may sleep ``delay`` seconds."""

    prompt = "Keep talking: a few words every turn."


# -- set-up -----------------------------------------------------------------------------
@dataclass
class Bench:
    """The model and its chat stack on one device."""

    model: Any
    processor: Any
    tokenizer: Any
    device: Any
    shape: Shape
    results: dict[str, Any] = field(default_factory=dict)
    engines: dict[str, Any] = field(default_factory=dict)  # name -> backend, built once

    def backend(self, engine: str) -> Any:
        """The transformers backend of ``engine`` (``calls`` or ``continuous``), kept for the
        run: a continuous one keeps its cache and CUDA graphs, as in a training run."""
        from trl_env.backends import build_backend

        if engine not in self.engines:
            self.engines[engine] = build_backend(
                "transformers",
                model=self.model,
                tokenizer=self.tokenizer,
                options={"engine": engine},
            )
        return self.engines[engine]

    def sync(self) -> None:
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize()

    @contextlib.contextmanager
    def timed(self, into: list[float]) -> Iterator[None]:
        self.sync()
        start = time.perf_counter()
        yield
        self.sync()
        into.append(time.perf_counter() - start)


def build(device_name: str, quick: bool, shape: Shape | None = None) -> Bench:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from trl_env.resolve import resolve_stack

    stack = resolve_stack("qwen3", {}, "tiny")
    config = AutoConfig.from_pretrained(stack.model_path)
    dtype = torch.float32
    if not quick:
        config.update(QWEN3_0_6B)
        # the tiny config names each of its layers' attention kind: one per layer of the new depth
        config.layer_types = ["full_attention"] * config.num_hidden_layers
        dtype = torch.bfloat16 if device_name == "cuda" else torch.float32
    device = torch.device(device_name)
    torch.manual_seed(0)
    with device:  # initialised in place: 0.6B random weights are built on the GPU in a moment
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.eval()
    return Bench(
        model, stack.processor, stack.tokenizer, device, QUICK if quick else shape or Shape()
    )


def rollout(
    bench: Bench,
    n: int,
    turns: int,
    *,
    engine: str = "continuous",
    backend: Any = None,
    envs: list[BenchEnv] | None = None,
    on_episode: Any = None,
) -> list[Any]:
    from trl_env import batch_rollout

    if backend is None:
        backend = bench.backend(engine)
    return batch_rollout(
        [f"s{i}" for i in range(n)],
        env=envs if envs is not None else (lambda: BenchEnv(turns)),
        processor=bench.processor,
        tokenizer=bench.tokenizer,
        backend=backend,
        max_turns=turns,
        max_new_tokens=bench.shape.tokens,
        max_episode_tokens=1_000_000,
        on_episode=on_episode,
    )


def generate_tokens(
    bench: Bench, prompt: list[int], n: int, new_tokens: int, ragged: bool = False
) -> int:
    """One ``model.generate`` call: ``n`` copies of ``prompt``, exactly ``new_tokens`` each.

    ``ragged``: row ``i`` hides its first ``i % 8`` tokens behind padding, so attention takes a
    mask, as it must over a rollout's rows of different lengths (no flash kernel in sdpa).
    """
    import torch

    pads = [i % 8 if ragged else 0 for i in range(n)]
    pad = bench.tokenizer.pad_token_id
    rows = [[pad] * k + list(prompt[k:]) for k in pads]  # one width, different lengths
    mask = [[0] * k + [1] * (len(prompt) - k) for k in pads]
    ids = torch.tensor(rows, device=bench.device)
    with torch.no_grad():
        out = bench.model.generate(
            input_ids=ids,
            attention_mask=torch.tensor(mask, device=bench.device),
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            pad_token_id=pad,
        )
    return int(out.shape[0] * (out.shape[1] - ids.shape[1]))


def generate_batch_tokens(bench: Bench, prompt: list[int], n: int, new_tokens: int) -> int:
    """transformers' own continuous batching (``generate_batch``) on ``n`` copies of ``prompt``,
    ``new_tokens`` each (no EOS): its default settings on a GPU, a small cache on a CPU."""
    import torch
    from transformers import ContinuousBatchingConfig, GenerationConfig

    config = GenerationConfig(
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        eos_token_id=-1,  # every request makes its new_tokens, as generate does here
        pad_token_id=bench.tokenizer.pad_token_id,
    )
    cb = None
    if bench.device.type != "cuda":  # sized by free memory otherwise: minutes on a CPU
        cb = ContinuousBatchingConfig(num_blocks=4 * n, max_batch_tokens=256, page_size=64)
    else:
        torch.cuda.empty_cache()  # it sizes its cache from the memory left free
    attention = bench.model.config._attn_implementation
    with torch.no_grad():
        out = bench.model.generate_batch(
            inputs=[list(prompt)] * n,
            generation_config=config,
            continuous_batching_config=cb,
            progress_bar=False,
        )
    if bench.model.config._attn_implementation != attention:  # it may switch to a paged one
        bench.model.set_attn_implementation(attention)
    if bench.device.type == "cuda":  # its cache, back to the device for the others
        gc.collect()
        torch.cuda.empty_cache()
    return sum(len(o.generated_tokens) for o in out.values())


# -- the measurements -------------------------------------------------------------------
ENGINES = ("continuous", "calls")


def throughput(bench: Bench, bandwidth_gb_s: float) -> list[dict[str, Any]]:
    """Rollout tokens/s of each engine over ``generate`` tokens/s, per episode and turn count.

    Each pair measures the continuous engine and ``generate`` (and, in the first
    ``calls_pairs``, the calls engine), who goes first in turn; the median pair by ratio is
    reported. The first pair also measures a ``generate`` of ragged rows (``ratio_to_ragged``:
    the masked attention a batch of rows of different lengths runs) and transformers'
    ``generate_batch`` on the same requests (``ratio_to_continuous``).
    """
    shape, rows = bench.shape, []
    bandwidth = bandwidth_gb_s * 1e9
    for engine in ENGINES:  # kernels, allocator, graphs of small batches, a GPU's clocks
        warm = rollout(bench, 2, 2, engine=engine)
        rollout(bench, shape.episodes[0], 2, engine=engine)
    generate_tokens(bench, warm[0].prompt_ids, 2, 4)
    prompt = warm[0].prompt_ids
    for n in shape.episodes:
        for turns in shape.turns:
            # This size's shapes, outside the timing: the continuous engine's batch buckets and
            # the cache's length (each growth drops its CUDA graphs), the calls engine's batch.
            rollout(bench, n, turns, engine="continuous")
            rollout(bench, n, 1, engine="calls")
            new = turns * shape.tokens
            pairs: list[dict[str, tuple[int, float, list[Any]]]] = []
            for k in range(shape.throughput_pairs):
                sides = ["continuous", "generate"] + ["calls"] * (k < shape.calls_pairs)
                sides += list(shape.references) if k == 0 else []
                sides = sides[k % len(sides) :] + sides[: k % len(sides)]  # who goes first
                took: dict[str, tuple[int, float, list[Any]]] = {}
                for side in sides:
                    seconds: list[float] = []
                    episodes: list[Any] = []
                    with bench.timed(seconds):
                        if side in ENGINES:
                            episodes = rollout(bench, n, turns, engine=side)
                            made = sum(ep.sampled_tokens for ep in episodes)
                        elif side == "generate_batch":
                            made = generate_batch_tokens(bench, prompt, n, new)
                        else:
                            made = generate_tokens(bench, prompt, n, new, side == "ragged")
                    took[side] = (made, seconds[0], episodes)
                pairs.append(took)
            first = pairs[0]
            for engine in ENGINES:
                runs = []
                for took in pairs:
                    if engine in took:
                        made, ours_s, episodes = took[engine]
                        made_g, theirs_s, _ = took["generate"]
                        runs.append(((made / ours_s) / (made_g / theirs_s), made, ours_s, took))
                ratio, sampled, ours_s, took = sorted(runs, key=lambda r: r[0])[len(runs) // 2]
                made, theirs_s, _ = took["generate"]
                speed = sampled / ours_s
                row: dict[str, Any] = {
                    "engine": engine,
                    "episodes": n,
                    "turns": turns,
                    "rollout_tokens": sampled,
                    "rollout_s": round(ours_s, 3),
                    "rollout_tok_s": round(speed, 1),
                    "generate_tokens": made,
                    "generate_s": round(theirs_s, 3),
                    "generate_tok_s": round(made / theirs_s, 1),
                    "ratio": round(ratio, 3),
                    "pair_ratios": [round(r[0], 3) for r in runs],
                }
                for side, key in (
                    ("ragged", "ragged_generate"),
                    ("generate_batch", "generate_batch"),
                ):
                    if side in first:
                        other, other_s, _ = first[side]
                        row[f"{key}_tokens"] = other
                        row[f"{key}_s"] = round(other_s, 3)
                        row[f"{key}_tok_s"] = round(other / other_s, 1)
                        column = "ratio_to_ragged" if side == "ragged" else "ratio_to_continuous"
                        row[column] = round(speed / (other / other_s), 3)
                limit = roofline(bench, took[engine][2], bandwidth)
                row.update(limit)
                row["share_of_limit"] = float(f"{speed / limit['limit_tok_s']:.4g}")
                if engine == "continuous":
                    row["engine_state"] = bench.backend(engine).state()
                rows.append(row)
                print(
                    f"  throughput {n} x {turns} turns, {engine}: {row['ratio']}x generate, "
                    f"{row.get('ratio_to_continuous')}x generate_batch",
                    flush=True,
                )
    return rows


def roofline(bench: Bench, episodes: list[Any], bandwidth: float) -> dict[str, Any]:
    """The tokens/s at which a rollout's decode steps would stream what they must read.

    Each step reads the weights once; each sampled token's step reads its row's KV cache up to
    that token (keys and values of every layer). With every row in step, the rollout needs as
    many steps as its longest episode samples tokens. Prefill, sampling and the logits'
    traffic are left out: the figure is a floor on time, so a ceiling on tokens/s.
    """
    config = bench.model.config.get_text_config()
    dtype_bytes = next(bench.model.parameters()).element_size()
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    kv_per_token = (
        2 * config.num_hidden_layers * config.num_key_value_heads * head_dim * dtype_bytes
    )
    weights = sum(p.numel() * p.element_size() for p in bench.model.parameters())
    steps = max(ep.sampled_tokens for ep in episodes)
    kv = 0
    for ep in episodes:
        start = len(ep.prompt_ids)
        kv += sum(start + j for j, m in enumerate(ep.env_mask) if m)
    total = steps * weights + kv * kv_per_token
    sampled = sum(ep.sampled_tokens for ep in episodes)
    return {
        "weight_bytes": weights,
        "kv_bytes_per_token": kv_per_token,
        "bytes_per_step": round(total / steps),
        "limit_tok_s": round(sampled / (total / bandwidth), 1),
    }


def memory_bandwidth(device: Any) -> float:
    """GB/s of a device-to-device copy (bytes read plus written): what streaming reaches here."""
    import torch

    size = (1 << 30) if device.type == "cuda" else (64 << 20)
    source = torch.empty(size, dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    target.copy_(source)
    best = float("inf")
    for _ in range(5):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        target.copy_(source)
        if device.type == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return round(2 * size / best / 1e9, 1)


def batching(bench: Bench, engine: str) -> dict[str, Any]:
    """All episodes at once against one at a time."""
    n, turns = bench.shape.batching
    took: list[float] = []
    with bench.timed(took):
        rollout(bench, n, turns, engine=engine)
    with bench.timed(took):
        for _ in range(n):
            rollout(bench, 1, turns, engine=engine)
    return {
        "engine": engine,
        "episodes": n,
        "turns": turns,
        "batched_s": round(took[0], 3),
        "one_at_a_time_s": round(took[1], 3),
        "speedup": round(took[1] / took[0], 2),
    }


def slow_envs(bench: Bench) -> list[dict[str, Any]]:
    """When the fast episodes are done, with 10% slow envs against none, on each engine."""
    n, turns = bench.shape.slow
    slow = {i for i in range(n) if i % 10 == 0}

    def finish_times(engine: str, delays: list[float]) -> dict[str, float]:
        start = time.perf_counter()
        done: dict[str, float] = {}
        envs = [BenchEnv(turns, d) for d in delays]
        rollout(
            bench,
            n,
            turns,
            engine=engine,
            envs=envs,
            on_episode=lambda ep: done.setdefault(ep.seed, time.perf_counter() - start),
        )
        return done

    fast = [f"s{i}" for i in range(n) if i not in slow]
    rows = []
    for engine in ENGINES:
        finish_times(engine, [0.0] * n)  # this size's shapes, seen once before any pair
        pairs = []
        for _ in range(bench.shape.slow_pairs):
            all_fast = finish_times(engine, [0.0] * n)
            mixed = finish_times(
                engine, [bench.shape.slow_delay if i in slow else 0.0 for i in range(n)]
            )
            alone, with_slow = max(all_fast[s] for s in fast), max(mixed[s] for s in fast)
            slow_done = max(mixed[f"s{i}"] for i in slow)
            pairs.append((with_slow / alone, alone, with_slow, slow_done))
        ratio, fast_alone, fast_mixed, slow_done = sorted(pairs)[len(pairs) // 2]
        rows.append(
            {
                "engine": engine,
                "episodes": n,
                "turns": turns,
                "slow_episodes": len(slow),
                "slow_step_s": bench.shape.slow_delay,
                "fast_done_all_fast_s": round(fast_alone, 3),
                "fast_done_with_slow_s": round(fast_mixed, 3),
                "slow_done_s": round(slow_done, 3),
                "fast_ratio": round(ratio, 3),
                "pair_ratios": [round(p[0], 3) for p in pairs],
                "note": "the median of the pairs (all fast, then with slow envs) by fast_ratio",
            }
        )
        print(f"  slow envs, {engine}: pairs {rows[-1]['pair_ratios']}", flush=True)
    return rows


def grpo_step(bench: Bench, out_dir: str, engine: str) -> dict[str, Any]:
    """One GRPO step's time, split into the rollout and the rest (loss, backward, optimizer)."""
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from trl_env import env_reward, make_rollout_func

    n, group, turns = bench.shape.grpo
    inner = make_rollout_func(
        env=lambda: BenchEnv(turns),
        processor=bench.processor,
        backend="transformers",
        backend_options={"engine": engine},
        max_turns=turns,
        max_new_tokens=bench.shape.tokens,
        max_episode_tokens=1_000_000,
    )
    rollout_s: list[float] = []
    step_s: list[float] = []

    def timed_rollout(prompts: list[Any], trainer: Any) -> dict[str, Any]:
        with bench.timed(rollout_s):
            return inner(prompts, trainer)

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *args: Any, **kwargs: Any) -> None:
            bench.sync()
            self.start = time.perf_counter()

        def on_step_end(self, *args: Any, **kwargs: Any) -> None:
            bench.sync()
            step_s.append(time.perf_counter() - self.start)

    cuda = bench.device.type == "cuda"
    args = GRPOConfig(
        output_dir=out_dir,
        per_device_train_batch_size=n,
        num_generations=group,
        max_steps=bench.shape.grpo_steps,
        learning_rate=1e-6,
        use_cpu=not cuda,
        bf16=next(bench.model.parameters()).dtype == torch.bfloat16,
        gradient_checkpointing=False,
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        seed=0,
    )
    rewards: list[Any] = [env_reward]
    trainer = GRPOTrainer(
        model=bench.model,
        args=args,
        processing_class=bench.tokenizer,
        reward_funcs=rewards,
        train_dataset=Dataset.from_dict({"prompt": [f"s{i}" for i in range(n * 4)]}),
        rollout_func=timed_rollout,
        callbacks=[StepTimer()],
    )
    trainer.train()
    step, roll = step_s[-1], rollout_s[-1]
    return {
        "engine": engine,
        "episodes": n,
        "group": group,
        "turns": turns,
        "step_s": round(step, 3),
        "rollout_s": round(roll, 3),
        "update_s": round(step - roll, 3),
        "rollout_share": round(roll / step, 3),
        "samples_per_s": round(n / step, 3),
    }


# -- vLLM -------------------------------------------------------------------------------
@contextlib.contextmanager
def vllm_server(bench: Bench) -> Iterator[str]:
    """``vllm serve`` on the benchmark's weights, as ``trl vllm-serve`` runs it."""
    import torch

    torch.cuda.empty_cache()  # vLLM takes its share of the memory left free
    with tempfile.TemporaryDirectory() as path:
        bench.model.save_pretrained(path)
        bench.tokenizer.save_pretrained(path)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", path]
        command += ["--host", "127.0.0.1", "--port", str(port), "--dtype", "bfloat16"]
        command += ["--logprobs-mode", "processed_logprobs", "--gpu-memory-utilization", "0.5"]
        command += ["--max-model-len", "8192", "--seed", "0"]
        # Token ids in and out only: most ids the random model samples lie outside the tiny
        # tokenizer's vocabulary, which vLLM's detokenizer would have to name.
        command += ["--skip-tokenizer-init"]
        proc = subprocess.Popen(command, stdout=sys.stderr)  # its log: not this script's output
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 900
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"vllm serve exited with status {proc.returncode}")
                try:
                    with urllib.request.urlopen(url + "/health", timeout=5):
                        break
                except OSError:
                    if time.monotonic() > deadline:
                        raise RuntimeError("vllm serve did not come up in 900 s") from None
                    time.sleep(2)
            yield url
        finally:
            proc.terminate()
            proc.wait(120)


def one_call_tokens(url: str, prompt: list[int], n: int, new_tokens: int) -> int:
    """vLLM generating ``n`` continuations of ``new_tokens`` each, in one completions request."""
    with urllib.request.urlopen(url + "/v1/models", timeout=30) as answer:
        model = json.load(answer)["data"][0]["id"]
    body = {
        "model": model,
        "prompt": [prompt] * n,
        "max_tokens": new_tokens,
        "min_tokens": new_tokens,
        "ignore_eos": True,
        "temperature": 1.0,
        "logprobs": 0,  # as the rollout asks: the sampled token's logprob, named by its id
        "return_token_ids": True,
        "return_tokens_as_token_ids": True,
    }
    request = urllib.request.Request(
        url + "/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=3600) as answer:
        choices = json.load(answer)["choices"]
    return sum(len(c["token_ids"]) for c in choices)


def vllm_rows(bench: Bench, running_url: str | None = None) -> list[dict[str, Any]]:
    """vLLM rollout tokens/s over vLLM's own tokens/s for the same token count in one call.

    Against ``vllm serve`` started here on the benchmark's weights, or a server already
    running at ``running_url``.
    """
    from trl_env.backends import build_backend

    sizes, turns = bench.shape.vllm
    rows = []
    server = contextlib.nullcontext(running_url) if running_url else vllm_server(bench)
    with server as url:
        backend = build_backend("vllm", options={"vllm_server_base_url": url})
        with urllib.request.urlopen(url + "/v1/models", timeout=30) as answer:
            model = json.load(answer)["data"][0]["id"]
        rollout(bench, 2, 2, backend=backend)  # warm-up
        for n in sizes:
            took: list[float] = []
            with bench.timed(took):
                episodes = rollout(bench, n, turns, backend=backend)
            errors = sum(1 for ep in episodes if ep.error)
            sampled = sum(ep.sampled_tokens for ep in episodes)
            again = replay(url, model, [requests_of(ep) for ep in episodes])
            with bench.timed(took):
                made = one_call_tokens(url, episodes[0].prompt_ids, n, turns * bench.shape.tokens)
            ours, theirs = sampled / took[0], made / took[1]
            rows.append(
                {
                    "episodes": n,
                    "turns": turns,
                    "rollout_tokens": sampled,
                    "replay_tokens": again["tokens"],
                    "rollout_tok_s": round(ours, 1),
                    "replay_tok_s": round(again["tokens_per_s"], 1),
                    "rollout_over_replay": round(ours / again["tokens_per_s"], 3),
                    "one_call_tok_s": round(theirs, 1),
                    "ratio": round(ours / theirs, 3),
                    "episodes_in_error": errors,
                }
            )
    return rows


class NoWeightSync:
    """TRL's ``WeightTransferProtocol`` doing nothing (see the module docstring, 6.)."""

    def init_weight_transfer(self) -> None: ...
    def pause(self) -> None: ...
    def send_weights(self, iterator: Any) -> None:
        for _ in iterator:  # the trainer's gather still runs, as it would for a real sync
            pass

    def resume(self) -> None: ...
    def destroy(self) -> None: ...


def async_steps(bench: Bench, out_dir: str, url: str) -> dict[str, Any]:
    """``AsyncGRPOTrainer`` with trl-env's worker: time per step and the trainer's wait share."""
    from datasets import Dataset
    from trl.experimental.async_grpo import AsyncGRPOConfig, AsyncGRPOTrainer

    from trl_env.async_worker import EnvRolloutWorker

    n, group, turns = bench.shape.grpo
    steps = max(4, bench.shape.grpo_steps * 2)
    model_dir = os.path.join(out_dir, "model")
    bench.model.save_pretrained(model_dir)
    bench.tokenizer.save_pretrained(model_dir)
    prompts = [f"s{i}" for i in range(n * 8)]
    worker = EnvRolloutWorker(
        env=lambda: BenchEnv(turns),
        processor=bench.processor,
        tokenizer=bench.tokenizer,
        vllm_server_base_url=url,
        num_generations=group,
        max_inflight_episodes=2 * n,
        prompts=prompts,
        model=model_dir,
        max_turns=turns,
        max_new_tokens=bench.shape.tokens,
        max_episode_tokens=1_000_000,
    )
    args = AsyncGRPOConfig(
        output_dir=os.path.join(out_dir, "run"),
        per_device_train_batch_size=n,
        num_generations=group,
        max_steps=steps,
        learning_rate=1e-6,
        vllm_server_base_url=url,
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        seed=0,
        dtype="bfloat16",
    )
    trainer = AsyncGRPOTrainer(
        model=model_dir,
        args=args,
        train_dataset=Dataset.from_dict({"prompt": prompts}),
        processing_class=bench.tokenizer,
        rollout_worker=worker,
        weight_transfer=NoWeightSync(),
    )
    trainer.train()
    logs = [h for h in trainer.state.log_history if "perf/step_s" in h]
    later = logs[1:] or logs  # the first logged step pays for warm-up
    step = statistics.median(h["perf/step_s"] for h in later)
    waited = statistics.median(h.get("perf/rollout_wait_s", 0.0) for h in later)
    return {
        "episodes": n,
        "group": group,
        "turns": turns,
        "steps": steps,
        "step_s": round(step, 3),
        "wait_s": round(waited, 3),
        "wait_share": round(waited / step, 3) if step else None,
        "samples_per_s": round(n / step, 3) if step else None,
        "weight_sync": "none (one GPU: see the module docstring)",
    }


# -- report -----------------------------------------------------------------------------
def targets(results: dict[str, Any]) -> dict[str, Any]:
    """The GPU targets against this run's figures (meaningful for the full GPU run).

    Issue 50's, on the continuous engine at the largest size: at least 3x ``generate``'s
    tokens/s and more than ``generate_batch``'s; the slow-env ratio at most 1.3 in every pair;
    the run within 8 minutes (its own wall time; gpu_lent.sh's install comes on top). Issue 15's
    (the calls engine at 0.9x ``generate`` or more at 64 and 256 episodes) stays beside them.
    """
    rows = results["throughput"]
    out: dict[str, Any] = {}
    continuous = [r for r in rows if r["engine"] == "continuous"]
    if continuous:
        largest = max(continuous, key=lambda r: (r["episodes"], r["turns"]))
        at = f"{largest['episodes']} episodes x {largest['turns']} turns"
        out["continuous_over_generate"] = {
            "value": largest["ratio"],
            "at": at,
            "target": ">= 3",
            "met": largest["ratio"] >= 3,
        }
        if "ratio_to_continuous" in largest:
            out["continuous_over_generate_batch"] = {
                "value": largest["ratio_to_continuous"],
                "at": at,
                "target": "> 1",
                "met": largest["ratio_to_continuous"] > 1,
            }
    for row in results["slow_envs"]:
        worst = max(row["pair_ratios"])
        out[f"slow_env_fast_ratio_{row['engine']}"] = {
            "value": worst,
            "target": "<= 1.3 in every pair",
            "met": worst <= 1.3,
        }
    took = results.get("seconds_with_install", results["seconds"])
    out["seconds"] = {
        "value": took,
        "with_install": "seconds_with_install" in results,
        "target": "<= 480",
        "met": took <= 480,
    }
    big = [r["ratio"] for r in rows if r["engine"] == "calls" and r["episodes"] in (64, 256)]
    if big:
        out["calls_throughput_ratio_64_256"] = {
            "value": min(big),
            "target": ">= 0.9",
            "met": min(big) >= 0.9,
        }
    return out


def summary(results: dict[str, Any]) -> dict[str, Any]:
    """The ``--all`` ratios, each None where its section was not measured."""
    vllm, sync, asy = results.get("vllm"), results.get("grpo_step"), results.get("async")
    rows = vllm if isinstance(vllm, list) else []
    async_over_sync = None
    if isinstance(sync, dict) and isinstance(asy, dict) and asy.get("samples_per_s"):
        async_over_sync = round(asy["samples_per_s"] / sync["samples_per_s"], 3)
    throughput = results["throughput"]

    def lowest(engine: str, key: str) -> float | None:
        values = [r[key] for r in throughput if r["engine"] == engine and key in r]
        return min(values, default=None)

    return {
        "rollout_over_replay_vllm": min((r["rollout_over_replay"] for r in rows), default=None),
        "rollout_over_generate": {e: lowest(e, "ratio") for e in ENGINES},
        "rollout_over_generate_batch": {e: lowest(e, "ratio_to_continuous") for e in ENGINES},
        "share_of_limit": {e: lowest(e, "share_of_limit") for e in ENGINES},
        "grpo_rollout_share": sync.get("rollout_share") if isinstance(sync, dict) else None,
        "async_over_sync_samples_per_s": async_over_sync,
        "note": "each the lowest over the sizes measured; None: that section was not run",
    }


def machine(bench: Bench) -> dict[str, Any]:
    import torch
    import transformers
    import trl

    info: dict[str, Any] = {
        "device": str(bench.device),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "trl": trl.__version__,
        "cpu_threads": torch.get_num_threads(),
        "dtype": str(next(bench.model.parameters()).dtype),
        "parameters": sum(p.numel() for p in bench.model.parameters()),
    }
    if bench.device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(bench.device)
        info["cuda"] = torch.version.cuda
    info["memory_bandwidth_gb_s"] = memory_bandwidth(bench.device)  # a copy's, measured here
    return info


def device_name(bench: Bench) -> str:
    import torch

    if bench.device.type == "cuda":
        return str(torch.cuda.get_device_name(bench.device))
    return platform.processor() or platform.machine() or "cpu"


def table(results: dict[str, Any]) -> str:
    lines = [f"machine: {results['machine']}", ""]
    head = f"{'engine':>10} {'episodes':>8} {'turns':>5} {'rollout tok/s':>14} "
    head += f"{'generate tok/s':>15} {'ratio':>6} {'/ragged':>7} {'/gen_batch':>10} {'of limit':>8}"
    lines += ["rollout vs model.generate (and the limit the memory bandwidth sets)", head]
    for r in results["throughput"]:
        lines.append(
            f"{r['engine']:>10} {r['episodes']:>8} {r['turns']:>5} {r['rollout_tok_s']:>14} "
            f"{r['generate_tok_s']:>15} {r['ratio']:>6} {r.get('ratio_to_ragged', '-'):>7} "
            f"{r.get('ratio_to_continuous', '-'):>10} {r['share_of_limit']:>8.1%}"
        )
    b = results["batching"]
    lines += [
        "",
        f"batched vs one at a time ({b['engine']}, {b['episodes']} episodes, {b['turns']} turns): "
        f"{b['batched_s']} s vs {b['one_at_a_time_s']} s, {b['speedup']}x"
        if isinstance(b, dict)
        else f"batched vs one at a time: {b}",
    ]
    for s in results["slow_envs"]:
        lines += [
            f"10% slow envs ({s['engine']}, {s['slow_episodes']}/{s['episodes']} at "
            f"{s['slow_step_s']} s a step): fast episodes done at {s['fast_done_with_slow_s']} s "
            f"vs {s['fast_done_all_fast_s']} s all fast ({s['fast_ratio']}x, pairs "
            f"{s['pair_ratios']}); slow ones at {s['slow_done_s']} s",
        ]
    g = results.get("grpo_step")
    if isinstance(g, dict) and "step_s" in g:
        lines.append(
            f"GRPO step ({g['engine']}, {g['episodes']} episodes, groups of {g['group']}, "
            f"{g['turns']} turns): "
            f"{g['step_s']} s = rollout {g['rollout_s']} s ({g['rollout_share']:.0%}) "
            f"+ update {g['update_s']} s"
        )
    for name, t in results["targets"].items():
        verdict = "met" if t["met"] else "missed"
        lines.append(f"target {name}: {t['value']} (target {t['target']}): {verdict}")
    lines.append(f"the run took {results['seconds']} s")
    a = results.get("async")
    if isinstance(a, dict):
        lines.append(
            f"async GRPO ({a['episodes']} episodes, groups of {a['group']}, {a['turns']} turns): "
            f"{a['step_s']} s a step, of which the trainer waits {a['wait_s']} s "
            f"({a['wait_share']:.0%}); weight sync: {a['weight_sync']}"
        )
    elif a is not None:
        lines.append(f"async GRPO: {a}")
    vllm = results.get("vllm")
    if isinstance(vllm, list):
        lines += [
            "",
            "vLLM rollout vs replay of its requests and vs one vLLM call",
            f"{'episodes':>8} {'turns':>5} {'rollout tok/s':>14} {'replay tok/s':>13} "
            f"{'/replay':>7} {'one call tok/s':>15} {'ratio':>6}",
        ]
        for r in vllm:
            lines.append(
                f"{r['episodes']:>8} {r['turns']:>5} {r['rollout_tok_s']:>14} "
                f"{r['replay_tok_s']:>13} {r['rollout_over_replay']:>7} "
                f"{r['one_call_tok_s']:>15} {r['ratio']:>6}"
            )
    else:
        lines.append(f"vLLM: {vllm}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    parser.add_argument("--quick", action="store_true", help="tiny shapes: a smoke run")
    parser.add_argument("--out", default="gpu_bench.json", help="where the JSON goes")
    parser.add_argument("--skip", default="", help="comma-separated: batching, grpo, vllm")
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's own)")
    parser.add_argument(
        "--vllm-url", help="measure vLLM at this running server instead of starting `vllm serve`"
    )
    parser.add_argument(
        "--async",
        dest="run_async",
        action="store_true",
        help="also run TRL's AsyncGRPOTrainer with trl-env's rollout worker (needs vllm, CUDA)",
    )
    parser.add_argument(
        "--all", action="store_true", help="every section (--async too) at sizes for ~8 minutes"
    )
    parser.add_argument("--json", action="store_true", help="print the JSON, not the table")
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        default="continuous",
        help="the transformers engine of the batching and GRPO sections (throughput and slow "
        "envs measure both)",
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    args.run_async = args.run_async or args.all
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(
            "No CUDA device here: run `python bench/gpu.py --device cpu --quick` for a smoke run."
        )
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    bench = build(args.device, args.quick, ALL if args.all else None)
    progress = out = sys.stdout
    if args.json:  # stdout holds the JSON alone: progress and the trainers' logs go to stderr
        progress = sys.stdout = sys.stderr
    results: dict[str, Any] = {
        "command": " ".join(
            ["python", "bench/gpu.py", *(argv if argv is not None else sys.argv[1:])]
        ),
        "device": device_name(bench),
        "seconds": None,
        "shape": asdict(bench.shape),
        "machine": machine(bench),
    }

    launched = os.environ.get("TRL_ENV_BENCH_LAUNCHED")  # gpu_lent.sh: before its install

    def keep() -> None:  # after each section, so a run cut off at its time limit keeps the rest
        results["seconds"] = round(time.perf_counter() - started, 1)  # this run's own wall time
        if launched:
            results["seconds_with_install"] = round(time.time() - float(launched), 1)
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)

    print("measuring throughput", file=progress, flush=True)
    results["throughput"] = throughput(bench, results["machine"]["memory_bandwidth_gb_s"])
    keep()
    if "batching" in skip:
        results["batching"] = "skipped (--skip batching)"
    else:
        print("measuring batching", file=progress, flush=True)
        results["batching"] = batching(bench, args.engine)
    keep()
    print("measuring slow envs", file=progress, flush=True)
    results["slow_envs"] = slow_envs(bench)
    keep()
    if "vllm" in skip:
        results["vllm"] = "skipped (--skip vllm)"
    elif args.vllm_url:
        print(f"measuring vLLM at {args.vllm_url}", file=progress, flush=True)
        results["vllm"] = vllm_rows(bench, args.vllm_url)
    elif importlib.util.find_spec("vllm") is None or bench.device.type != "cuda":
        results["vllm"] = "not measured: needs vllm installed and a CUDA device"
    else:
        print("measuring vLLM", file=progress, flush=True)
        results["vllm"] = vllm_rows(bench)
    keep()
    if args.run_async:
        if importlib.util.find_spec("vllm") is None or bench.device.type != "cuda":
            results["async"] = "not measured: needs vllm installed and a CUDA device"
        else:
            say = "measuring AsyncGRPOTrainer with trl-env's rollout worker"
            print(say, file=progress, flush=True)
            with tempfile.TemporaryDirectory() as out_dir:
                server = contextlib.nullcontext(args.vllm_url) if args.vllm_url else None
                with server or vllm_server(bench) as url:
                    results["async"] = async_steps(bench, out_dir, url)
        keep()
    if "grpo" in skip:  # last: training changes the weights the others sample from
        results["grpo_step"] = "skipped (--skip grpo)"
    else:
        print("measuring a GRPO step", file=progress, flush=True)
        with tempfile.TemporaryDirectory() as out_dir:
            results["grpo_step"] = grpo_step(bench, out_dir, args.engine)
    keep()
    results["targets"] = targets(results)
    if args.all:
        results["summary"] = summary(results)
    keep()
    if args.json:
        print(json.dumps(results, indent=2), file=out, flush=True)
    else:
        print()
        print(table(results))
    print(f"\nwrote {args.out}", file=sys.stderr if args.json else sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A real model learns the games: SFT on demonstrations, then GRPO, on SmolLM2-135M-Instruct on CPU.

Paths, in one process, with the same model, env, seeds, steps, group size, learning rate,
token budgets and SFT start (``--warmup N``: ``trl-env sft``'s code on N demonstration
episodes, applied to each path's model before RL):

- ``trl_env``: ``make_rollout_func``, free-text turns, exact token ids;
- ``trl_recipe``: the multi-turn recipe TRL documents for free-text envs, a ``rollout_func``
  that re-applies the chat template to the whole conversation each turn and generates with the
  trainer's model (as TRL's OpenEnv Wordle example does); it counts the tokens it trains on
  that were not sampled (re-tokenised turns);
- ``baseline`` (``--only baseline``): TRL's ``environment_factory``, each action a tool call;
  only for a model that can call tools (SmolLM2 cannot, so it is not run by default).

Each path is evaluated on held-out seeds (the env's ``eval`` split) before any training
(``base``), after the warm-up (``sft``) and after RL (``after``), through the trainer's own
evaluation loop; ``delta`` (after - base) and ``rl_delta`` (after - sft) are paired by seed,
with a 95% t interval.

    python bench/learn.py --env guess --quick --warmup 64 [--json] [--out DIR]

``--out DIR`` writes ``DIR/learn.json`` (everything, per-step rewards included) and the plots
``DIR/learning-reward.svg`` and ``DIR/learning-heldout.svg``. The paths run side by side, one
process each (``--jobs``, default one per CPU), so ``--quick`` on guess takes one path's time.

TRL's tool path needs a chat template that ``trl.chat_template_utils.add_response_schema``
recognises. SmolLM2's own (ChatML without tools) is refused, so the baseline renders the same
weights with TRL's ``qwen2_5`` template, the closest one: ChatML too, with Qwen's tool syntax.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any, cast

from trl_env.report.stats import mean_ci

# Per env: its options here, and what the baseline's system turn adds (docs/learning.md says
# why echo is the default). echo: three words a turn each; the untrained model copies almost
# none exactly. guess: 1-20 in three turns; the untrained model scores about 0.3.
ENVS: dict[str, dict[str, Any]] = {
    "echo": {"max_turns": 3},
    "guess": {"low": 1, "high": 20, "max_turns": 5},
    "wordle": {"max_turns": 6},
    "sokoban": {"width": 6, "height": 6, "boxes": 1, "max_turns": 8},
    # TextWorld's default game: 3 rooms, 4 objects, a quest of 3 steps, the commands listed
    "textworld": {"max_turns": 10},
}
# Tokens a model turn and an episode (after the prompt) may take, by env: a copied word is a
# token or two, and a chatty reply is cut at the turn cap all the same.
# A sokoban demonstration is one reply of a few moves ("left up left down down"): 16 tokens.
TOKENS = {"echo": (16, 128), "guess": (16, 160), "wordle": (16, 256), "sokoban": (16, 256)}
TOKENS["textworld"] = (16, 768)  # a reply lists the room's commands: ~70 tokens a turn
# The RL learning rate and warm-up by env, where --lr and --warmup are not given: echo learns
# from scratch at 1e-4; on guess a warm-up on 4 demonstrations leaves RL room, and GRPO at 2e-5
# adds to it where 1e-4 undid it (docs/learning.md). wordle and sokoban start the same way.
_GAME = {"lr": 2e-5, "warmup": 4}
TRAINING: dict[str, dict[str, float]] = {"guess": _GAME, "wordle": _GAME, "sokoban": _GAME}
TRAINING["textworld"] = {"lr": 2e-5, "warmup": 16}  # the walkthroughs of 16 games
DEFAULT_TRAINING: dict[str, float] = {"lr": 1e-4, "warmup": 0}
TOOL_HINT = {
    "echo": "Copy each word by calling the say tool with it.",
    "guess": "Make each guess by calling the guess tool.",
}
# The env's own splits: eval seeds are held out (echo even draws their words from a held-out
# fifth of its list).
TRAIN_PREFIX, HELD_OUT_PREFIX = "train-", "eval-"
BASELINE_TEMPLATE = "qwen2_5"

PATHS = ("trl_env", "trl_recipe")  # "baseline" (environment_factory) only when asked for
QUICK = {"steps": 10, "prompts": 2, "group": 8, "eval_seeds": 24, "eval_samples": 1}
# wordle and sokoban episodes run longer (6-8 turns, most unsolved): their quick runs take fewer
# steps and held-out seeds, so that one path of one seed fits 15-30 minutes on one core.
QUICK_BY_ENV: dict[str, dict[str, int]] = {
    "wordle": {"steps": 6, "eval_seeds": 16},
    "sokoban": {"steps": 4, "eval_seeds": 12},
    "textworld": {"steps": 4, "eval_seeds": 12},
}
FULL = {"steps": 30, "prompts": 4, "group": 8, "eval_seeds": 48, "eval_samples": 2}


def paired(before: dict[str, float], after: dict[str, float]) -> dict[str, Any]:
    """Means before and after and their change paired by seed, each with a 95% t interval.

    Only seeds present on both sides count; ``n`` says how many.
    """
    seeds = sorted(set(before) & set(after))
    b = [before[s] for s in seeds]
    a = [after[s] for s in seeds]
    d = [after[s] - before[s] for s in seeds]
    return {
        "n": len(seeds),
        "before": _ci(b),
        "after": _ci(a),
        "delta": _ci(d),
    }


def _ci(values: list[float]) -> dict[str, Any]:
    ci = mean_ci(values)
    bounds = [ci.low, ci.high] if ci.low is not None and ci.high is not None else [None, None]
    return {"mean": ci.mean, "ci95": bounds}


def per_seed(records: list[tuple[Any, ...]]) -> dict[str, float]:
    """The mean reward of each seed over its samples (records ``(seed, reward[, success])``)."""
    by_seed: dict[str, list[float]] = defaultdict(list)
    for seed, reward, *_ in records:
        by_seed[seed].append(reward)
    return {s: sum(v) / len(v) for s, v in by_seed.items()}


def solved_per_seed(records: list[tuple[Any, ...]]) -> dict[str, float]:
    """The share of each seed's samples the env called a success (records ``(seed, reward,
    success)``; those whose env does not say are left out)."""
    return per_seed([(r[0], float(r[2])) for r in records if len(r) > 2 and r[2] is not None])


def _solved(values: dict[str, float]) -> float:
    return sum(values.values())


def _grpo_args(opts: argparse.Namespace, out: Path, name: str) -> Any:
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=str(out / name),
        max_steps=opts.steps,
        # one group per forward pass, the step's groups accumulated: the logits of a 49k-token
        # vocabulary over a whole step's episodes took 8.7 GB, and the shared machine killed it
        per_device_train_batch_size=opts.group,
        gradient_accumulation_steps=opts.prompts,
        num_generations=opts.group,
        num_generations_eval=opts.eval_samples,
        per_device_eval_batch_size=opts.eval_seeds * opts.eval_samples,
        learning_rate=opts.lr,
        beta=0.0,
        temperature=opts.temperature,
        max_completion_length=opts.episode_tokens,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        seed=opts.seed,
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        disable_tqdm=True,
        # the baseline's per-turn cap; trl-env reads its own from RolloutConfig
        generation_kwargs={"max_new_tokens": opts.turn_tokens},
        max_tool_calling_iterations=opts.env_options["max_turns"],
    )


def _timed_run(
    trainer: Any,
    recorder: list[tuple[Any, ...]],
    log: Callable[[str], None],
    name: str,
    warmup: Callable[[Any], dict[str, Any]] | None = None,
    phase: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Held-out eval (``base``); the SFT warm-up of the trainer's model and a held-out eval
    (``sft``); RL; a held-out eval (``after``). Per-step training rewards; wall-clock seconds.
    ``phase`` is told which evaluation (base, sft, after) or training comes next."""
    evaluations = iter(("base", "sft") if warmup is not None else ("base",))

    solved: dict[str, dict[str, float]] = {}

    def held_out() -> dict[str, float]:
        import torch

        which = next(evaluations, "after")
        if phase is not None:
            phase(which)

        # Every evaluation draws the same random numbers (trl-env's rollout keys its eval streams
        # so; the recipe's generate draws from torch's generator, seeded alike here): the
        # changes are paired by randomness as well as by seed.
        torch.manual_seed(trainer.args.seed)
        recorder.clear()
        trainer.evaluate()
        mine = [r for r in recorder if r[0].startswith(HELD_OUT_PREFIX)]
        solved[which] = solved_per_seed(mine)
        return per_seed(mine)

    t0 = time.perf_counter()
    base = held_out()
    eval_seconds = time.perf_counter() - t0
    log(f"{name}: held-out base {_avg(base):.3f} ({eval_seconds:.0f} s)")
    warm: dict[str, Any] = {}
    start = base
    if warmup is not None:
        t0 = time.perf_counter()
        warm = warmup(trainer.model)
        warm["seconds"] = round(time.perf_counter() - t0, 1)
        log(f"{name}: SFT on {warm['episodes']} demonstrations in {warm['seconds']:.0f} s")
        t0 = time.perf_counter()
        start = held_out()
        eval_seconds += time.perf_counter() - t0
        log(f"{name}: held-out after SFT {_avg(start):.3f}")
    if phase is not None:
        phase("train")
    t0, cpu0 = time.perf_counter(), time.process_time()
    trainer.train()
    seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    log(f"{name}: trained {trainer.state.global_step} steps in {seconds:.0f} s")
    t0 = time.perf_counter()
    after = held_out()
    eval_seconds += time.perf_counter() - t0
    log(f"{name}: held-out after {_avg(after):.3f}")
    steps = [h for h in trainer.state.log_history if "reward" in h and "loss" in h]
    rewards = [h["reward"] for h in steps]
    evals = [h for h in trainer.state.log_history if "eval_reward" in h]
    total = paired(base, after)
    rl = paired(start, after)
    won = {k: solved.get(k, {}) for k in ("base", "after")}
    won["sft"] = solved.get("sft", won["base"])
    return {
        "n": total["n"],
        "base": total["before"],
        "sft": rl["before"],
        "after": total["after"],
        "delta": total["delta"],
        "rl_delta": rl["delta"],
        # the earlier names, kept for readers of older learn.json files
        "before": rl["before"],
        "seconds": round(seconds, 1),
        # CPU time of RL and of the whole path in this process: the wall time it would take
        # on a core of its own, whatever else the machine ran (one torch thread)
        "cpu_seconds": round(cpu, 1),
        "path_cpu_seconds": round(time.process_time(), 1),
        "eval_seconds": round(eval_seconds, 1),
        "warmup": warm,
        "steps": trainer.state.global_step,
        "train_reward": rewards,
        # how the model acts: turns played (trl-env), tool calls made (TRL), per step and eval
        "train_actions": [_actions(h, "") for h in steps],
        "eval_actions": [_actions(h, "eval_") for h in evals],
        "base_by_seed": base,
        "before_by_seed": start,
        "after_by_seed": after,
        # held-out seeds the env called solved (its success), at each stage, and RL's paired
        # change of the share solved (per seed 0 or 1 with one sample a seed)
        "solved": {k: _solved(v) for k, v in won.items()},
        "rl_solved_delta": paired(won["sft"], won["after"])["delta"] if won["after"] else None,
        "solved_by_seed": won,
    }


def _actions(logs: dict[str, Any], prefix: str) -> dict[str, float]:
    keys = [
        # the share of GRPO groups whose rewards were all equal (no gradient from them), and
        # with --credit turn the share of episodes whose every turn's advantage was 0
        "frac_reward_zero_std",
        "credit/frac_episodes_zero_advantage",
        "rollout/turns",
        "rollout/success",
        "tools/call_frequency",
        "tools/failure_frequency",
        "completions/mean_length",
        "completions/clipped_ratio",
    ]
    return {k: float(logs[prefix + k]) for k in keys if prefix + k in logs}


def _avg(values: dict[str, float]) -> float:
    return sum(values.values()) / len(values) if values else math.nan


def _datasets(opts: argparse.Namespace, row: Callable[[str], Any]) -> tuple[Any, Any]:
    from datasets import Dataset

    train = [row(f"{TRAIN_PREFIX}{i}") for i in range(opts.steps * opts.prompts)]
    held_out = [row(f"{HELD_OUT_PREFIX}{i}") for i in range(opts.eval_seeds)]
    return Dataset.from_list(train), Dataset.from_list(held_out)


def warmup_for(
    opts: argparse.Namespace, stack: Any, out: Path, name: str
) -> Callable[[Any], dict[str, Any]] | None:
    """``--warmup N``: SFT of a model (in place) on N demonstration episodes of the env's
    training seeds, rendered by trl-env's wire (``trl-env sft``'s code); the same for every
    path, so each starts RL from the same weights."""
    if not opts.warmup:
        return None

    def warm(model: Any) -> dict[str, Any]:
        from trl_env import EnvSpec, RolloutConfig
        from trl_env.player import Player
        from trl_env.training import sft
        from trl_env.wire import Wire, model_eos_ids

        spec, config = EnvSpec(opts.env, options=opts.env_options), RolloutConfig()
        seeds = [f"{TRAIN_PREFIX}{1000 + i}" for i in range(opts.warmup)]  # not RL's seeds
        wire = Wire.bind(stack.processor, stack.tokenizer, model_eos_ids(model))
        with Player(spec, stack.processor, config) as player:  # one host for the warm-up
            scripts = sft.read_demonstrations(player, spec, seeds)
            host, options = player.hosts[spec.label], spec.options_at()
            demos = sft.render_demonstrations(host, seeds, scripts, wire, config, options)
        settings = sft.SftSettings(
            epochs=opts.sft_epochs, learning_rate=opts.sft_lr, batch_size=8, seed=opts.seed
        )
        trainer = sft.make_trainer(
            demos.rows(), model, stack.tokenizer, out / f"sft-{name}", settings
        )
        trainer.train()
        losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
        model.eval()
        return {
            "episodes": len(demos.episodes),
            "left_out": dict(demos.left_out),
            "trained_tokens": demos.trained_tokens,
            "loss": [losses[0], losses[-1]] if losses else [],
        }

    return warm


def _trainer(
    opts: argparse.Namespace,
    stack: Any,
    out: Path,
    name: str,
    row: Callable[[str], Any],
    tokenizer: Any,
    trainer: type | None = None,
    **plays: Any,
) -> Any:
    """The GRPOTrainer of path ``name`` (or ``trainer``, a subclass): every path gets the same
    model, config and seeds; ``plays`` is how the path plays (reward and ``rollout_func``, or
    ``environment_factory``)."""
    from trl import GRPOTrainer

    from trl_env.models import load_model

    train, held_out = _datasets(opts, row)
    return (trainer or GRPOTrainer)(
        model=load_model(stack.model_path),
        args=_grpo_args(opts, out, name),
        train_dataset=train,
        eval_dataset=held_out,
        processing_class=tokenizer,
        **plays,
    )


class _EpisodeFile:
    """trl-env's episodes of a run as JSON lines (``DIR/episodes-trl_env.jsonl``): the phase
    (``eval-base``, ``eval-sft``, ``train``, ``eval-after``) and step, the seed, reward and
    success, and each turn's action and reward, to read what the model does at each stage."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.trainer: Any = None
        self.phase = ""
        path.write_text("", encoding="utf-8")

    def write(self, episodes: list[Any]) -> None:
        trainer = self.trainer
        step = int(trainer.state.global_step) if trainer is not None else 0
        training = trainer is not None and trainer.model.training
        phase = "train" if training else f"eval-{self.phase}"
        with self.path.open("a", encoding="utf-8") as f:
            for ep in episodes:
                actions = [m["content"] for m in ep.messages if m["role"] == "assistant"]
                f.write(json.dumps({
                    "phase": phase, "step": step, "seed": str(ep.seed),
                    "reward": ep.reward, "success": ep.success, "status": str(ep.status),
                    "actions": actions, "turn_rewards": ep.turn_rewards,
                }) + "\n")  # fmt: skip


def run_trl_env(opts: argparse.Namespace, out: Path, log: Callable[[str], None]) -> dict[str, Any]:
    """GRPO through trl-env: the env's free-text turns, token ids kept exactly."""
    import torch

    from trl_env import EnvSpec, RolloutConfig, env_reward, make_rollout_func
    from trl_env.resolve import resolve_stack
    from trl_env.training.credit import CreditGRPOTrainer

    torch.manual_seed(opts.seed)
    stack = resolve_stack(opts.processor, {}, opts.model, check=opts.check)
    recorder: list[tuple[Any, ...]] = []
    played = _EpisodeFile(out / "episodes-trl_env.jsonl")

    def record(episodes: list[Any]) -> None:
        recorder.extend((str(ep.seed), float(ep.reward), ep.success) for ep in episodes)
        played.write(episodes)

    # trl-env's episode budget counts the prompt, TRL's max_completion_length does not: the
    # same completion budget on both sides (guess's first prompt has one length for every seed)
    prompt_tokens = _first_prompt_tokens(stack, opts.env, opts.env_options)
    rollout = make_rollout_func(
        env=EnvSpec(opts.env, options=opts.env_options),
        processor=stack.processor,
        config=RolloutConfig(
            max_new_tokens=opts.turn_tokens,
            max_episode_tokens=prompt_tokens + opts.episode_tokens,
            credit=opts.credit,
        ),
        on_episodes=record,
    )
    trainer = _trainer(
        opts,
        stack,
        out,
        "trl_env",
        lambda seed: {"prompt": seed},
        cast(Any, stack.tokenizer),  # a transformers tokenizer here
        CreditGRPOTrainer,  # GRPOTrainer itself with --credit episode
        reward_funcs=[cast(Any, env_reward)],
        rollout_func=rollout,
    )
    _quiet(trainer, log, "trl_env")
    played.trainer = trainer
    try:
        warm = warmup_for(opts, stack, out, "trl_env")
        return _timed_run(
            trainer, recorder, log, "trl_env", warm, lambda p: setattr(played, "phase", p)
        )
    finally:
        rollout.close()


class RecipeRollout:
    """TRL's documented multi-turn recipe for a free-text env, as a TRL user writes it (the
    shape of TRL's OpenEnv Wordle example): a ``rollout_func`` that, each turn, re-applies the
    model's chat template to the whole conversation, generates with the trainer's model, steps
    the env with the decoded text; at the end the conversation is rendered once more and its
    ids (re-tokenised) are what GRPO trains on, the env's turns masked out (``env_mask``).

    It also counts what it trains on that the model did not sample: model turns whose
    re-tokenised ids differ from the sampled ones, and their tokens."""

    def __init__(self, opts: argparse.Namespace, tokenizer: Any, recorder: list[Any]) -> None:
        self.opts, self.tok, self.recorder = opts, tokenizer, recorder
        self.stop_id = tokenizer.convert_tokens_to_ids(tokenizer.eos_token)
        self.turns = self.retokenised_turns = self.unsampled_tokens = 0

    def render(self, messages: list[dict[str, str]], generation: bool) -> list[int]:
        text = self.tok.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=generation
        )
        return list(self.tok(text, add_special_tokens=False)["input_ids"])

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        import torch

        from trl_env import extras
        from trl_env.registry import load_env

        envs = [load_env(self.opts.env, **self.opts.env_options) for _ in prompts]
        chats = []
        for env, seed in zip(envs, prompts, strict=True):
            first = env.reset(str(seed))
            chats.append([
                {"role": "system", "content": extras.system_prompt(env)},
                {"role": "user", "content": first},
            ])  # fmt: skip
        sampled: list[list[list[int]]] = [[] for _ in prompts]
        logps: list[list[list[float]]] = [[] for _ in prompts]
        first_len = [len(self.render(c, True)) for c in chats]
        model = trainer.model
        was_training = model.training
        model.eval()
        while True:
            live = [
                i
                for i, env in enumerate(envs)
                if env.alive
                and len(sampled[i]) < self.opts.env_options["max_turns"]
                and len(self.render(chats[i], True)) - first_len[i] + self.opts.turn_tokens
                <= self.opts.episode_tokens
            ]
            if not live:
                break
            texts = [
                self.tok.apply_chat_template(chats[i], tokenize=False, add_generation_prompt=True)
                for i in live
            ]
            batch = self.tok(texts, add_special_tokens=False, padding=True, padding_side="left",
                             return_tensors="pt")  # fmt: skip
            with torch.no_grad():
                out = model.generate(
                    **batch,
                    do_sample=True,
                    temperature=self.opts.temperature,
                    top_k=0,
                    top_p=1.0,
                    max_new_tokens=self.opts.turn_tokens,
                    eos_token_id=self.stop_id,
                    pad_token_id=self.tok.pad_token_id,
                    return_dict_in_generate=True,
                    output_scores=True,
                )
            # the sampled tokens' logprobs under the sampling distribution (temperature applied)
            new = out.sequences[:, batch["input_ids"].shape[1] :]
            scores = torch.stack(out.scores, dim=1).float().log_softmax(-1)
            token_logps = scores.gather(-1, new.unsqueeze(-1)).squeeze(-1)
            for row, i in enumerate(live):
                ids = new[row].tolist()
                if self.stop_id in ids:
                    ids = ids[: ids.index(self.stop_id) + 1]
                sampled[i].append(ids)
                logps[i].append(token_logps[row, : len(ids)].tolist())
                text = self.tok.decode(ids, skip_special_tokens=True)
                chats[i].append({"role": "assistant", "content": text})
                chats[i].append({"role": "user", "content": envs[i].step(text)})
        model.train(was_training)
        prompt_ids, completion_ids, masks, rewards, logprobs = [], [], [], [], []
        for i, env in enumerate(envs):
            chat = (
                chats[i][:-1] if chats[i][-1]["role"] == "user" and len(chats[i]) > 2 else chats[i]
            )
            full = self.render(chat, False)
            prompt = self.render(chat[:2], True)
            mask = [0] * (len(full) - len(prompt))
            turn_logps = [0.0] * len(mask)
            turn = 0
            for k, message in enumerate(chat):
                if message["role"] != "assistant":
                    continue
                lo = len(self.render(chat[:k], True)) - len(prompt)
                hi = len(self.render(chat[: k + 1], False)) - len(prompt)
                trained = full[len(prompt) + lo : len(prompt) + hi]
                mask[lo:hi] = [1] * (hi - lo)
                # position by position: where the ids were re-tokenised they do not match
                got = logps[i][turn][: hi - lo]
                turn_logps[lo : lo + len(got)] = got
                self._count(trained, sampled[i][turn])
                turn += 1
            prompt_ids.append(prompt)
            completion_ids.append(full[len(prompt) :])
            masks.append(mask)
            logprobs.append(turn_logps)
            rewards.append(float(env.reward))
            won = getattr(env, "success", None)
            self.recorder.append((str(prompts[i]), float(env.reward), won))
        return {
            "prompt_ids": prompt_ids,
            "completion_ids": completion_ids,
            "logprobs": logprobs,
            "env_mask": masks,
            "env_reward": rewards,
        }

    def _count(self, trained: list[int], sampled: list[int]) -> None:
        """A turn is trained on as its re-tokenised ids (the template's closer and newline
        after it too); the tokens of those that are not, position by position, what was
        sampled are counted."""
        self.turns += 1
        differ = sum(1 for a, b in zip(trained, sampled, strict=False) if a != b)
        differ += max(0, len(trained) - len(sampled))
        if differ:
            self.retokenised_turns += 1
            self.unsampled_tokens += differ


def _recipe_reward(completions: list[Any], env_reward: list[float], **_: Any) -> list[float]:
    return [float(r) for r in env_reward]


def run_trl_recipe(
    opts: argparse.Namespace, out: Path, log: Callable[[str], None]
) -> dict[str, Any]:
    """GRPO through TRL's documented multi-turn recipe (:class:`RecipeRollout`)."""
    import torch

    from trl_env.resolve import resolve_stack

    torch.manual_seed(opts.seed)
    stack = resolve_stack(opts.processor, {}, opts.model, check=opts.check)
    tokenizer = cast(Any, stack.tokenizer)  # a transformers tokenizer here
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    recorder: list[tuple[Any, ...]] = []
    rollout = RecipeRollout(opts, tokenizer, recorder)
    trainer = _trainer(
        opts,
        stack,
        out,
        "trl_recipe",
        lambda seed: {"prompt": seed},
        tokenizer,
        reward_funcs=[cast(Any, _recipe_reward)],
        rollout_func=rollout,
    )
    _quiet(trainer, log, "trl_recipe")
    result = _timed_run(
        trainer, recorder, log, "trl_recipe", warmup_for(opts, stack, out, "trl_recipe")
    )
    result["recipe_counts"] = {
        "model_turns": rollout.turns,
        "retokenised_turns": rollout.retokenised_turns,
        "unsampled_tokens": rollout.unsampled_tokens,
    }
    return result


def _first_prompt_tokens(stack: Any, name: str, options: dict[str, Any]) -> int:
    from trl_env import extras
    from trl_env.registry import load_env

    env = load_env(name, **options)
    text = extras.first_prompt(stack.processor, extras.system_prompt(env), env.reset("train-0"))
    return len(stack.tokenizer(text, add_special_tokens=False)["input_ids"])


def _quiet(trainer: Any, log: Callable[[str], None], name: str) -> None:
    """One line per training step through ``log``, instead of log dicts on stdout (``--json``
    prints one object there)."""
    from transformers.trainer_callback import PrinterCallback, TrainerCallback

    class StepLine(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            if logs and "reward" in logs and "loss" in logs:
                log(f"{name}: step {state.global_step} reward {logs['reward']:.3f}")

    trainer.remove_callback(PrinterCallback)
    trainer.add_callback(StepLine())


def tools_class(name: str, recorder: list[tuple[str, float]], options: dict[str, Any]) -> type:
    """The env for ``environment_factory``: the env ``name`` with its one action as a tool."""
    from trl_env.registry import load_env

    class EnvTools:
        def __init__(self) -> None:
            self.env = load_env(name, **options)
            self.seed = ""

        def reset(self, seed: str, **_: Any) -> str:
            self.seed = seed
            return str(self.env.reset(seed))

        def _act(self, action: str) -> str:
            if not self.env.alive:
                raise ValueError("The game is over.")
            return str(self.env.step(action))

        def get_reward(self) -> float:
            reward = float(self.env.reward)
            recorder.append((self.seed, reward))
            return reward

    # TRL makes a tool of every public method but reset and get_reward: the action is added here
    # so that each env has a tool with its own name, typed arguments and docstring.
    class GuessTools(EnvTools):
        def guess(self, number: int) -> str:
            """Guess the hidden number.

            Args:
                number: Your guess, a whole number.

            Returns:
                Whether the hidden number is higher or lower, or that the guess is right.
            """
            return self._act(str(number))

    class EchoTools(EnvTools):
        def say(self, word: str) -> str:
            """Say a word: the copy of the word shown.

            Args:
                word: The word, exactly as shown.

            Returns:
                Whether it was the word, and the next word to copy.
            """
            return self._act(word)

    return {"guess": GuessTools, "echo": EchoTools}[name]


def baseline_tokenizer(path: str) -> Any:
    """The model's tokenizer with TRL's ``qwen2_5`` chat template (see the module docstring)."""
    from transformers import AutoTokenizer
    from trl.chat_template_utils import add_response_schema, supports_tool_calling

    tokenizer = AutoTokenizer.from_pretrained(path)
    if not supports_tool_calling(tokenizer):
        template = resources.files("trl") / "chat_templates" / f"{BASELINE_TEMPLATE}.jinja"
        tokenizer.chat_template = template.read_text(encoding="utf-8")
    return add_response_schema(tokenizer)


def run_baseline(opts: argparse.Namespace, out: Path, log: Callable[[str], None]) -> dict[str, Any]:
    """GRPO through TRL's own multi-turn path: ``environment_factory``, guesses as tool calls."""
    import torch

    from trl_env.resolve import resolve_stack

    torch.manual_seed(opts.seed)
    stack = resolve_stack(opts.processor, {}, opts.model, check=opts.check)
    tokenizer = baseline_tokenizer(stack.model_path)
    recorder: list[tuple[str, float]] = []
    from trl_env import extras
    from trl_env.registry import load_env

    probe = load_env(opts.env, **opts.env_options)
    # the env's own instructions, told that an action is a tool call here
    system = f"{extras.system_prompt(probe)} {TOOL_HINT[opts.env]}"

    def row(seed: str) -> dict[str, Any]:
        return {
            "prompt": [{"role": "system", "content": system}, {"role": "user", "content": ""}],
            "seed": seed,
        }

    trainer = _trainer(
        opts,
        stack,
        out,
        "baseline",
        row,
        tokenizer,
        environment_factory=tools_class(opts.env, recorder, opts.env_options),
    )
    _quiet(trainer, log, "baseline")
    return _timed_run(trainer, recorder, log, "baseline", warmup_for(opts, stack, out, "baseline"))


def per_minute(result: dict[str, Any]) -> float:
    """Held-out reward RL gained (after - sft) per minute of RL training."""
    gain = float(result["rl_delta"]["mean"])
    return gain / (result["seconds"] / 60) if result["seconds"] else 0.0


def plots(results: dict[str, Any], out: Path, env: str) -> list[Path]:
    """The training reward per step, and the held-out change with its interval, as SVG files."""
    from trl_env.report import charts

    lines = [
        charts.Series(name, [(float(i + 1), float(r)) for i, r in enumerate(res["train_reward"])])
        for name, res in results.items()
    ]
    reward = charts.line_chart(
        f"mean training reward per GRPO step ({env}, SmolLM2-135M-Instruct)",
        lines,
        "training step",
        "reward",
        integer_x=True,
        force_legend=True,
    )
    rows = []
    for name, res in results.items():
        for key in ("base", "sft", "after", "delta", "rl_delta"):
            lo, hi = res[key]["ci95"]
            rows.append((f"{name} {key}", float(res[key]["mean"]), lo, hi))
    heldout = charts.forest_chart(
        "held-out reward: base, after SFT, after RL, and the paired changes (95% t)",
        rows,
        "reward",
    )
    paths = [out / "learning-reward.svg", out / "learning-heldout.svg"]
    for path, svg in zip(paths, (reward, heldout), strict=True):
        path.write_text(charts.standalone(svg), encoding="utf-8")
    return paths


def table(results: dict[str, Any]) -> str:
    head = (
        "| path | base | after SFT | after RL | RL change (95% CI) | total change (95% CI) "
        "| RL s | RL gain / min |\n|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for name, res in results.items():
        lines.append(
            f"| {name} | {res['base']['mean']:.3f} | {res['sft']['mean']:.3f} | "
            f"{res['after']['mean']:.3f} | {_change(res['rl_delta'])} | {_change(res['delta'])} "
            f"| {res['seconds']:.0f} | {per_minute(res):+.4f} |"
        )
    return "\n".join(lines)


def _change(stat: dict[str, Any]) -> str:
    lo, hi = stat["ci95"]
    ci = f"[{lo:+.3f}, {hi:+.3f}]" if lo is not None else "n/a"
    return f"{stat['mean']:+.3f} {ci}"


def machine() -> dict[str, Any]:
    load = os.getloadavg() if hasattr(os, "getloadavg") else (math.nan,) * 3
    return {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_average": [round(x, 2) for x in load],
    }


def _by_env(which: int) -> str:
    return ", ".join(f"{env} {sizes[which]}" for env, sizes in TOKENS.items())


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="the small run (docs/learning.md)")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument("--env", choices=sorted(ENVS), default="echo", help="env (default: echo)")
    p.add_argument(
        "--env-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="env option over learn.py's own for the env (repeatable; YAML values)",
    )
    p.add_argument("--model", default="smollm2", help="model (default: smollm2)")
    p.add_argument("--processor", default="smollm2", help="trl-env processor (default: smollm2)")
    p.add_argument("--steps", type=int, help="GRPO steps of each run")
    p.add_argument("--prompts", type=int, help="seeds per step (each played --group times)")
    p.add_argument("--group", type=int, help="GRPO group size (num_generations)")
    p.add_argument("--eval-seeds", type=int, help="held-out seeds")
    p.add_argument("--eval-samples", type=int, help="episodes per held-out seed")
    p.add_argument(
        "--lr", type=float, help="RL learning rate (default: 2e-5 for the games, 1e-4 for echo)"
    )
    p.add_argument(
        "--temperature", type=float, default=0.7, help="sampling, training and eval (default: 0.7)"
    )
    p.add_argument(
        "--turn-tokens",
        type=int,
        help=f"tokens per model turn (default by env: {_by_env(0)})",
    )
    p.add_argument(
        "--episode-tokens",
        type=int,
        help=f"episode tokens after the prompt (default by env: {_by_env(1)})",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--threads", type=int, default=1, help="torch CPU threads (default 1; 0: torch's own)"
    )
    p.add_argument(
        "--no-check",
        dest="check",
        action="store_false",
        help="accept a processor that does not match the model's own chat template",
    )
    p.add_argument("--only", choices=[*PATHS, "baseline"], help="run one path only")
    p.add_argument(
        "--warmup",
        type=int,
        help="SFT on N demonstration episodes before RL (default: 4 for the games, 0 for echo)",
    )
    p.add_argument(
        "--credit",
        choices=("episode", "turn"),
        default="episode",
        help="trl_env's credit: episode (GRPO's) or turn (docs/learning.md; default: episode); "
        "the recipe's is always the episode's",
    )
    p.add_argument("--sft-epochs", type=float, default=2.0, help="SFT epochs (default: 2)")
    p.add_argument("--sft-lr", type=float, default=1e-4, help="SFT learning rate (default: 1e-4)")
    p.add_argument("--out", default="", help="folder for learn.json and the plots")
    p.add_argument(
        "--jobs",
        type=int,
        default=os.cpu_count() or 1,
        help="paths run side by side, one process each (default: one per CPU; 1: in turn)",
    )
    p.add_argument("--part", action="store_true", help=argparse.SUPPRESS)  # one path of --jobs
    opts = p.parse_args(argv)
    opts.env_options = {**ENVS[opts.env], **_env_args(p, opts.env_arg)}
    turn, episode = TOKENS[opts.env]
    sizes: dict[str, float] = {
        **({**QUICK, **QUICK_BY_ENV.get(opts.env, {})} if opts.quick else FULL),
        "turn_tokens": turn,
        "episode_tokens": episode,
        **DEFAULT_TRAINING,
        **TRAINING.get(opts.env, {}),
    }
    for key, value in sizes.items():
        if getattr(opts, key) is None:
            setattr(opts, key, value)
    return opts


def _env_args(p: argparse.ArgumentParser, given: list[str]) -> dict[str, Any]:
    import yaml

    out = {}
    for item in given:
        key, eq, value = item.partition("=")
        if not eq or not key:
            p.error(f"--env-arg {item!r}: give KEY=VALUE")
        out[key] = yaml.safe_load(value)
    return out


def side_by_side(names: list[str], argv: list[str], out: Path) -> dict[str, Any]:
    """Each path in its own process of this script, all at once; their results by name.

    The children write their run folders under ``out`` as one process would (each path's own)
    and print their results; their progress lines (each starts with the path) go to stderr.
    """
    me = str(Path(__file__).resolve())
    procs = {
        name: subprocess.Popen(
            [sys.executable, me, *argv, "--only", name, "--jobs", "1", "--part", "--out", str(out)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for name in names
    }
    results, failed = {}, []
    try:
        for name, proc in procs.items():
            stdout, _ = proc.communicate()
            if proc.returncode:
                failed.append(f"{name} (exit {proc.returncode})")
            else:
                results[name] = json.loads(stdout)[name]
    finally:
        for proc in procs.values():  # interrupted: no child outlives this process
            if proc.poll() is None:
                proc.terminate()
                proc.wait()
    if failed:
        raise SystemExit(f"bench/learn.py: {', '.join(failed)} failed; the errors are above.")
    return results


def main(argv: list[str] | None = None) -> int:
    opts = parse(argv)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

    def log(line: str) -> None:
        print(line, file=sys.stderr if opts.json or opts.part else sys.stdout, flush=True)

    if opts.threads:  # on a shared machine one thread a process wastes far less time waiting
        import torch

        torch.set_num_threads(opts.threads)
    out = Path(opts.out) if opts.out else Path("runs") / "learn"
    out.mkdir(parents=True, exist_ok=True)
    start_load = machine()
    runs = {"trl_env": run_trl_env, "trl_recipe": run_trl_recipe, "baseline": run_baseline}
    wanted = [opts.only] if opts.only else list(PATHS)
    if opts.jobs > 1 and len(wanted) > 1:
        given = list(argv if argv is not None else sys.argv[1:])
        results = side_by_side(wanted, given, out)
    else:
        results = {name: runs[name](opts, out, log) for name in wanted}
    if opts.part:  # the parent process reports
        print(json.dumps(results))
        return 0
    setup = {
        "env": opts.env,
        "env_options": opts.env_options,
        "model": opts.model,
        "processor": opts.processor,
        "processor_checked": opts.check,
        "baseline_template": BASELINE_TEMPLATE,
        **{k: getattr(opts, k) for k in ("steps", "prompts", "group", "eval_seeds")},
        **{k: getattr(opts, k) for k in ("eval_samples", "lr", "temperature", "seed")},
        **{k: getattr(opts, k) for k in ("turn_tokens", "episode_tokens", "threads")},
        **{k: getattr(opts, k) for k in ("warmup", "sft_epochs", "sft_lr", "credit")},
        "command": " ".join(["python", "bench/learn.py", *(argv or sys.argv[1:])]),
        "machine": {**machine(), "load_average_at_start": start_load["load_average"]},
    }
    report = {**results, "setup": setup}
    for res in results.values():
        res["gain_per_minute"] = per_minute(res)
    (out / "learn.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    plots(results, out, opts.env)
    if opts.json:
        print(json.dumps(report))
    else:
        print(table(results))
        print(f"written: {out / 'learn.json'}, {out / 'learning-reward.svg'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

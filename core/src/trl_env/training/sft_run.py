"""``run_sft``: a supervised warm-up on an env's demonstrations, from options to ``DIR/final``;
what ``trl-env sft`` runs, callable without it (as :func:`trl_env.training.run.train` is).

The env opens on one host for the whole run (:class:`~trl_env.player.Player`): its seeds, its
demonstrations and the episodes that replay them, so under process isolation this process
imports nothing of the env.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import TrlEnvError, UsageError
from ..redact import redact
from . import rundir
from .config import LORA_DEFAULTS, target_modules


def run_sft(
    env: str,
    processor: str,
    *,
    env_args: Mapping[str, Any] | None = None,
    processor_args: Mapping[str, Any] | None = None,
    model: str | None = None,
    episodes: int = 64,
    epochs: float = 3.0,
    learning_rate: float = 5e-5,
    batch_size: int = 8,
    seed: int = 0,
    lora: bool = False,
    lora_r: int = LORA_DEFAULTS["r"],
    lora_alpha: int = LORA_DEFAULTS["alpha"],
    lora_target_modules: str = LORA_DEFAULTS["target_modules"],
    rollout: Mapping[str, Any] | None = None,
    output_dir: Path | str | None = None,
    overwrite: bool = False,
    report_to: Sequence[str] = ("tensorboard",),
    progress: str = "bar",
) -> dict[str, Any]:
    """Train ``model`` on ``episodes`` demonstrations of ``env`` (its first training seeds),
    save it to ``output_dir/final`` and return the summary (also ``output_dir/summary.json``).

    ``rollout`` holds the rollout options that shape the episodes (``env_isolation``,
    ``max_episode_tokens``, ...); ``progress`` is "bar", "lines" or "lines-stderr". The options
    are saved as ``output_dir/config.yaml``, which ``trl-env sft --config`` runs again.
    """
    for flag, count in (("--episodes", episodes), ("--batch-size", batch_size)):
        if count < 1:
            raise UsageError(f"{flag} is {count}; it must be at least 1.")
    for flag, value in (("--epochs", epochs), ("--lr", learning_rate)):
        if not value > 0:
            raise UsageError(f"{flag} is {value}; it must be above 0.")
    lora_options = None
    if lora:
        modules = target_modules(lora_target_modules)
        lora_options = {"r": lora_r, "alpha": lora_alpha, "target_modules": modules}
    out = Path(output_dir or Path("runs") / f"sft-{env}-{processor}").absolute()
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise UsageError(
            f"--output-dir {out} is not empty; replace the run there with --overwrite, or "
            "choose another --output-dir."
        )
    rundir.check(out, resume=False, overwrite=True)  # a file, or files no run writes: refused
    env_args, processor_args = dict(env_args or {}), dict(processor_args or {})
    rollout = dict(rollout or {})

    from ..config import RolloutConfig
    from ..models import load_model
    from ..player import Player
    from ..redact import MASK, masked_keys
    from ..resolve import resolve_stack
    from ..spec import EnvSpec
    from ..wire import Wire, model_eos_ids
    from . import sft

    masked = list(masked_keys({"env_args": env_args, "rollout": rollout}))
    if masked:  # from an sft run's config.yaml, which never holds a URL's secret
        raise UsageError(
            f"{', '.join(masked)} holds a URL whose secret a run never saves (shown as {MASK}); "
            "give it again with its secret (--env-server URL, --env-arg url=URL)."
        )
    config = RolloutConfig(**rollout).validate()
    spec = EnvSpec(env, options=env_args)
    with Player(spec, processor, config, processor_options=processor_args) as player:
        seeds = player.seeds(spec, "train", episodes)
        scripts = sft.read_demonstrations(player, spec, seeds)
        try:
            stack = resolve_stack(processor, processor_args, model)
            llm = load_model(stack.model_path)
        except UsageError:
            raise
        except TrlEnvError as exc:  # a model or tokenizer that cannot be loaded: the user's input
            raise UsageError(str(exc)) from None
        wire = Wire.bind(stack.processor, stack.tokenizer, model_eos_ids(llm))
        host = player.hosts[spec.label]
        demos = sft.render_demonstrations(host, seeds, scripts, wire, config, spec.options_at())
    if not demos.episodes:
        why = "; ".join(f"{n} {reason}" for reason, n in demos.left_out.most_common())
        raise UsageError(f"None of the {len(seeds)} demonstrations can be trained on: {why}.")
    if overwrite and out.is_dir():
        rundir.clear(out)  # what check() found there is a run's
    rundir.ensure_writable(out)
    rundir.claim(out, "sft")  # first: what --overwrite may replace later
    settings = sft.SftSettings(
        epochs=epochs,
        learning_rate=learning_rate,
        batch_size=batch_size,
        seed=seed,
        lora=lora_options,
        report_to=tuple(report_to),
    )
    saved = {
        "command": "sft",
        "env": env,
        "env_args": env_args,
        "processor": processor,
        "processor_args": processor_args,
        "model": model or "tiny",
        "episodes": episodes,
        "epochs": epochs,
        "learning_rate": learning_rate,
        "batch_size": batch_size,
        "seed": seed,
        "lora": lora,
        "lora_r": lora_r,
        "lora_alpha": lora_alpha,
        "lora_target_modules": lora_target_modules,
        "report_to": list(report_to),
        "rollout": {k: getattr(v, "value", v) for k, v in sorted(rollout.items())},
        "output_dir": str(out),
    }
    _write_config(out, saved)
    sft.write_episodes(out / "episodes", demos.episodes)
    start = time.perf_counter()
    callbacks = [sft.progress_callback(progress)]
    trainer = sft.make_trainer(demos.rows(), llm, stack.tokenizer, out, settings, callbacks)
    figures = sft.train_sft(trainer, out)
    summary = {
        "kind": "sft",
        "env": spec.label,
        "processor": processor,
        "model": model or "tiny",
        "episodes": len(demos.episodes),
        "left_out": dict(demos.left_out),
        "trained_tokens": demos.trained_tokens,
        "tokens": sum(len(r["input_ids"]) for r in demos.rows()),
        "epochs": epochs,
        "learning_rate": learning_rate,
        "lora": lora,
        **figures,
        "seconds": round(time.perf_counter() - start, 2),
        "output_dir": str(out),
        "model_dir": str(out / "final"),
        "episodes_dir": str(out / "episodes"),
    }
    summary = redact(summary)
    rundir.write_summary(out, summary)
    return summary


def _write_config(out: Path, saved: dict[str, Any]) -> None:
    import yaml

    # secrets in URLs masked: those come again with their flags (--config refuses them masked)
    text = yaml.safe_dump(redact(saved), sort_keys=False)
    (out / rundir.CONFIG_FILE).write_text(text, encoding="utf-8")

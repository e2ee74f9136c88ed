"""A run's metadata (model, processor, env, sampling...) as rows of text for tables."""

from __future__ import annotations

import json
from typing import Any

from ..redact import redact_text
from .load import Source
from .summary import runs

# Sampling options read from a flat config (training) when there is no ``sampling`` mapping.
SAMPLING_KEYS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repetition_penalty",
    "max_new_tokens",
    "max_turns",
    "max_episode_tokens",
)


def _options(value: Any) -> str:
    if isinstance(value, dict):
        return " ".join(f"{k}={_scalar(v)}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return " ".join(map(str, value))
    return "" if value is None else str(value)


def _scalar(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _mixture(envs: Any) -> dict[str, str]:
    """A row per env of a mixture (``envs`` of a training config): ``env LABEL`` -> its settings
    that are set (weight, options, curriculum...)."""
    rows = {}
    for entry in envs if isinstance(envs, list) else []:
        if isinstance(entry, str):
            rows[f"env {entry}"] = "weight=1.0"
        elif isinstance(entry, dict) and entry.get("env"):
            label = entry.get("name") or entry["env"]
            settings = {k: v for k, v in entry.items() if k != "name" and v not in (None, {}, "")}
            if settings.get("env") == label:
                del settings["env"]
            rows[f"env {label}"] = _options(settings)
    return rows


def describe(run: dict[str, Any]) -> dict[str, str]:
    """Rows (name -> text) for one run's metadata; absent fields are left out."""
    sampling = run.get("sampling")
    if not isinstance(sampling, dict):
        sampling = {k: run[k] for k in SAMPLING_KEYS if k in run}
    rows = {
        "model": _options(run.get("model")),
        "processor": " ".join(
            filter(None, [_options(run.get("processor")), _options(run.get("processor_args"))])
        ),
        "env": " ".join(filter(None, [_options(run.get("env")), _options(run.get("env_args"))])),
        "sampling": _options(sampling),
        "seed": _options(run.get("seed")),
        "trl-env": _options(run.get("trl_env_version")),
        "time": _options(run.get("time")),
    }
    # fields added later (limits, backend, ...) still show, under their own names
    rows |= _mixture(run.get("envs"))
    shown = {"model", "processor", "processor_args", "env", "env_args", "sampling", "seed", "envs"}
    shown |= {"trl_env_version", "time", *SAMPLING_KEYS}
    rows |= {k: _options(v) for k, v in run.items() if k not in shown}
    # eval records of an older trl-env may carry a URL's secret in their env options
    return {k: redact_text(v) for k, v in rows.items() if v}


def source_runs(source: Source) -> list[tuple[dict[str, Any], int]]:
    """The distinct runs of a source with their episode counts.

    Eval records carry their ``run``; a training directory describes itself in config.yaml and
    summary.json instead. Old eval files have neither, which gives no rows.
    """
    found = runs(source.records)
    if found or not source.is_run:
        return found
    run: dict[str, Any] = dict(source.config or {})
    run.update({k: source.summary[k] for k in ("model", "processor", "env") if k in source.summary})
    return [(run, len(source.records))] if run else []

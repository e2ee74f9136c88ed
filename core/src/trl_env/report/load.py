"""Read episode records from an eval JSONL file or a training output directory.

Old files (no ``segments``, no ``run``, no ``env``/``stage``/``success``/``split``) and training
logs (a subset of the eval fields plus ``step``) are all accepted: every field a report uses has a
default here, in one place.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..redact import redact, redact_text

MAX_DEPTH = 64  # a record nested deeper is no episode record, and would crash what renders it
_SURROGATES = re.compile("[\ud800-\udfff]")


@dataclass
class Source:
    """What one PATH holds: its episode records and, for a training run, its side files."""

    path: Path
    records: list[dict[str, Any]]  # a training run's: its training episodes only
    is_run: bool = False
    # held-out episodes a training run played with --eval-every (split "eval"), kept apart so
    # they never mix into the training figures
    held_out: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    config_text: str = ""
    config: dict[str, Any] | None = None  # config.yaml's mapping, read by the bounded loader
    # TensorBoard scalars of a training run: tag -> [(step, value), ...]
    scalars: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what the report could not show, and why


def load(path: Path, *, scalars: bool = True) -> Source:
    """Records (normalized, see :func:`normalize`) and side files of ``path``."""
    if path.is_dir():
        files = sorted((path / "episodes").glob("rank*.jsonl"))
        if not files:
            raise UsageError(
                f"{path} is a directory without episodes/rank*.jsonl, so not a training output "
                "directory; give it one, or an eval file written by `trl-env eval --out`."
            )
        records = _read_jsonl(files)
        source = Source(
            path,
            [r for r in records if r["split"] == "train"],
            is_run=True,
            held_out=[r for r in records if r["split"] == "eval"],
        )
        if not source.records:
            raise UsageError(
                f"{path}/episodes holds only held-out episodes (split eval), no training "
                "episodes to report on."
            )
        source.summary = redact(_read_summary(path / "summary.json"))
        env = source.summary.get("env")
        if isinstance(env, str) and env:  # older training logs name no env: the run has one
            for rec in records:
                rec["env"] = rec["env"] or env
        source.config_text, source.config = _read_config(path / "config.yaml")
        if scalars and (path / "runs").is_dir():
            try:
                source.scalars = read_scalars(path / "runs")
            except ImportError:  # tensorboard comes with the [train] extra, view does not need it
                source.notes.append(
                    "The TensorBoard logs in runs/ are not plotted: tensorboard is not installed "
                    "(pip install tensorboard, or trl-env[train])."
                )
        return source
    if path.is_file():
        return Source(path, _read_jsonl([path]))
    raise UsageError(f"{path} does not exist.")


def _read_config(file: Path) -> tuple[str, dict[str, Any] | None]:
    """config.yaml's text and its mapping (None when it holds none), read as ``--config`` reads
    a file: a file over its size bound, or aliases that would expand past its value bound
    (a "billion laughs" document), are refused before anything is expanded."""
    import yaml

    from ..yamlfile import bounded_yaml, read_bounded

    if not file.is_file():
        return "", None
    text = read_bounded(file)
    try:
        data = bounded_yaml(text, f"Config file {file}")
    except yaml.YAMLError:
        data = None  # not YAML: still shown as text
    # a run of an older trl-env may have saved a URL's secret: never into a report
    return redact_text(text), redact(data) if isinstance(data, dict) else None


def _read_summary(file: Path) -> dict[str, Any]:
    if not file.is_file():
        return {}
    try:
        summary = json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{file} is not a JSON object ({exc}).") from exc
    except RecursionError:
        raise UsageError(f"{file} is nested too deeply to be a run's summary.") from None
    if not isinstance(summary, dict):
        raise UsageError(f"{file} holds a JSON {type(summary).__name__}, not an object.")
    if not repaired(summary):
        raise UsageError(f"{file} is nested more than {MAX_DEPTH} levels deep.")
    return summary


def _read_jsonl(files: list[Path]) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for file in files:
        try:
            content = file.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise UsageError(f"{file} is not a UTF-8 text file, so not JSONL.") from exc
        lines = content.splitlines()
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                if n == len(lines) and not content.endswith("\n"):
                    continue  # a record still being written by a live run: read it next time
                raise UsageError(f"{file}:{n} is not a JSON record: {exc.msg}.") from exc
            except RecursionError:
                rec = None
            if not isinstance(rec, dict):
                what = f"a JSON {type(rec).__name__}" if rec is not None else "too deeply nested"
                raise UsageError(f"{file}:{n} is {what}, not a record.")
            if not repaired(rec):
                raise UsageError(
                    f"{file}:{n} is nested more than {MAX_DEPTH} levels deep, not a record."
                )
            records.append(normalize(rec, len(records)))
    if not records:
        raise UsageError(f"No episode records found in {', '.join(map(str, files))}.")
    return records


def repaired(rec: dict[str, Any]) -> bool:
    """Replace lone surrogates (a JSON ``"\\ud800"`` escape decodes to one, and no page or
    terminal can encode it) by U+FFFD in every key and string of ``rec``, in place; False when
    ``rec`` is nested deeper than :data:`MAX_DEPTH`. Iterative: a deep record cannot overflow."""
    stack: list[tuple[Any, int]] = [(rec, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            return False
        if isinstance(node, dict):
            if any(isinstance(k, str) and _SURROGATES.search(k) for k in node):
                fixed = {_fix(k): v for k, v in node.items()}
                node.clear()
                node.update(fixed)
            items: Any = node.items()
        elif isinstance(node, list):
            items = enumerate(node)
        else:
            continue
        for key, value in list(items):
            if isinstance(value, str):
                if _SURROGATES.search(value):
                    node[key] = _fix(value)
            elif isinstance(value, dict | list):
                stack.append((value, depth + 1))
    return True


def _fix(text: Any) -> Any:
    return _SURROGATES.sub("\ufffd", text) if isinstance(text, str) else text


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def normalize(rec: dict[str, Any], index: int) -> dict[str, Any]:
    """The record with the report's fields filled in: a missing or odd value becomes a default.

    Adds ``index`` (order in the file), ``reward`` (float or None), ``turns`` (int or None),
    ``status``, ``seed`` and ``env`` as strings (``env`` from the record, else its ``run``),
    ``stage`` (int or None), ``stage_options`` (dict), ``success`` (bool or None) and ``split``
    ("eval" for a training run's held-out episodes, else "train").
    """
    out = dict(rec)
    run = rec.get("run") if isinstance(rec.get("run"), dict) else None
    out["run"] = run
    out["index"] = index
    out["seed"] = str(rec.get("seed", ""))
    out["reward"] = _number(rec.get("reward"))
    turns = _number(rec.get("turns"))
    out["turns"] = int(turns) if turns is not None else None
    out["status"] = str(rec.get("status") or "unknown")
    env = rec.get("env") if isinstance(rec.get("env"), str) else None
    out["env"] = env or (str(run["env"]) if run and run.get("env") else "")
    step = _number(rec.get("step"))
    out["step"] = int(step) if step is not None else None
    out["error"] = str(rec.get("error") or "")
    stage = rec.get("stage")
    # a bool is an int to Python, but never a stage index
    ok = isinstance(stage, int) and not isinstance(stage, bool) and stage >= 0
    out["stage"] = stage if ok else None
    options = rec.get("stage_options")
    out["stage_options"] = options if isinstance(options, dict) else {}
    success = rec.get("success")
    out["success"] = success if isinstance(success, bool) else None
    out["split"] = "eval" if rec.get("split") == "eval" else "train"
    return out


def read_scalars(folder: Path) -> dict[str, list[tuple[float, float]]]:
    """Every scalar in the TensorBoard event files under ``folder``: tag -> sorted points.

    Uses TensorBoard's own reader (it does not import torch; ImportError when tensorboard is not
    installed); a file it cannot read is skipped, the episode records alone still make a report.
    """
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util import tensor_util

    points: dict[str, dict[float, float]] = {}
    for file in sorted(folder.rglob("events.out.tfevents.*")):
        try:
            for event in EventFileLoader(str(file)).Load():
                for value in event.summary.value:
                    number = _scalar(value, tensor_util)
                    if number is not None:
                        points.setdefault(value.tag, {})[float(event.step)] = number
        except Exception:  # a truncated or foreign file: keep what was read
            continue
    return {tag: sorted(p.items()) for tag, p in sorted(points.items())}


def _scalar(value: Any, tensor_util: Any) -> float | None:
    # EventFileLoader migrates simple_value summaries to rank-0 tensors; older data has both.
    if value.HasField("simple_value"):
        return _number(value.simple_value)
    if value.HasField("tensor") and not value.tensor.tensor_shape.dim:
        try:
            return _number(tensor_util.make_ndarray(value.tensor).item())
        except (TypeError, ValueError):
            return None
    return None

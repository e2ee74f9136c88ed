"""Generation through a vLLM OpenAI-compatible server, the one ``trl vllm-serve`` starts.

Each row is one request, ``POST /v1/completions`` with the row's whole token history as the
prompt, the same request body TRL's ``VLLMClient.generate`` sends (token ids in and out,
``logprobs: 0``), plus the turn's own ``max_tokens`` and ``stop_token_ids``. The rows of a call
are sent concurrently, so the server's continuous batching and prefix cache do the work: a
history sent again is a prefix-cache hit. A session keeps its HTTP connections alive between
its requests. A row whose request fails comes back as ``Sample(error=...)`` and the other rows
go on.

Standard library only (``http.client`` and a thread pool): this module imports no torch and
adds no dependency, so a rollout process can talk to a remote server without a GPU stack.
"""

from __future__ import annotations

import http.client
import json
import logging
import socket
import threading
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from .base import Sample, SamplingParams, Turn, stream_key

DEFAULT_TIMEOUT = 600.0  # a long turn on a busy server can take minutes
# A completion's JSON takes ~100 bytes per token (id, logprob, text): 64 MiB is a turn of over
# half a million tokens. Anything longer is not an answer to a request of ours.
MAX_RESPONSE_BYTES = 64 * 2**20
CHUNK = 2**16
DEFAULT_CONCURRENCY = 256  # vLLM's default max_num_seqs: more would only queue on the server
HEALTH_TIMEOUT = 10.0
# An idle connection is taken again within this many seconds; vLLM's server (uvicorn) closes
# one idle for 5 s, and a request on a connection it just closed is sent again once.
KEEP_IDLE = 2.0
PROCESSED = "processed_logprobs"  # the logprobs mode trl-env and TRL's correction expect

log = logging.getLogger(__name__)


class ServerError(Exception):
    """A request to the server failed; the message is one sentence naming the server."""


class _Stale(Exception):
    """A kept connection was closed by the server before it answered: send again."""


@dataclass(frozen=True)
class Completion:
    """One sampled continuation: ids, the sampled tokens' logprobs, and why it ended."""

    ids: list[int]
    logprobs: list[float]
    finish_reason: str


class Inflight:
    """A session's connections: the sockets of requests in flight, which :meth:`abort` cuts off
    (the session closing), and the connections kept for its next requests."""

    def __init__(self) -> None:
        self.idle: list[tuple[float, http.client.HTTPConnection]] = []  # (since when, connection)
        self.lock = threading.Lock()
        self.sockets: set[socket.socket] = set()
        self.aborted = False

    def add(self, sock: socket.socket) -> None:
        with self.lock:
            self.sockets.add(sock)
            if self.aborted:
                _shut([sock], threading.Event())

    def discard(self, sock: socket.socket) -> None:
        with self.lock:
            self.sockets.discard(sock)

    def abort(self) -> None:
        """End every request in flight now, and any started later; close the kept connections."""
        with self.lock:
            self.aborted = True
            _shut(list(self.sockets), threading.Event())
            idle, self.idle = self.idle, []
        for _, conn in idle:
            conn.close()

    def take(self) -> http.client.HTTPConnection | None:
        """A kept connection idle for less than ``KEEP_IDLE`` s (older ones are closed)."""
        now = time.monotonic()
        with self.lock:
            while self.idle:
                since, conn = self.idle.pop()
                if now - since < KEEP_IDLE:
                    return conn
                conn.close()
        return None

    def keep(self, conn: http.client.HTTPConnection) -> bool:
        """Keep ``conn`` for the next request; False once the session is closing."""
        with self.lock:
            if self.aborted:
                return False
            self.idle.append((time.monotonic(), conn))
            return True


class VLLMServerClient:
    """The requests trl-env makes to a vLLM server: health, model list, completions."""

    def __init__(
        self,
        base_url: str,
        timeout: float = DEFAULT_TIMEOUT,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
    ) -> None:
        url = urllib.parse.urlsplit(base_url.rstrip("/"))
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"The vLLM server URL {base_url!r} is not an http:// or https:// URL.")
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.max_response_bytes = max_response_bytes
        self._https = url.scheme == "https"
        self._host = url.hostname
        self._port = url.port
        self._prefix = url.path  # a server behind a proxy may live under a path

    # -- transport ------------------------------------------------------------------------
    def _request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        timeout: float = 0.0,
        inflight: Inflight | None = None,
    ) -> bytes:
        """The body of a 200 answer; anything else raises :class:`ServerError`.

        ``timeout`` (default: the client's) bounds the whole request, connecting to the last
        byte, not each read: a server that answers a byte at a time is cut off at the deadline.
        A body over ``max_response_bytes`` is refused without being read to its end. With
        ``inflight``, the request can be cut off from another thread (:meth:`Inflight.abort`).

        A session's requests (those with ``inflight``) keep their connections alive: the
        session's next request takes one idle for less than ``KEEP_IDLE`` s, and sends again
        once on a new one if the server had closed it (nothing of an answer read).
        """
        limit = timeout or self.timeout
        kept = inflight.take() if inflight is not None else None
        try:
            return self._exchange(
                kept or self._connect(limit), kept is not None, method, path, body, limit, inflight
            )
        except _Stale:
            return self._exchange(self._connect(limit), False, method, path, body, limit, inflight)

    def _connect(self, limit: float) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        return cls(self._host, self._port, timeout=limit)

    def _exchange(
        self,
        conn: http.client.HTTPConnection,
        reused: bool,
        method: str,
        path: str,
        body: dict[str, Any] | None,
        limit: float,
        inflight: Inflight | None,
    ) -> bytes:
        deadline = time.monotonic() + limit
        where = f"The vLLM server at {self.base_url}"
        late = f"{where} did not answer {path} within {limit:g} s."
        cancelled = f"The request to the vLLM server at {self.base_url} was cancelled."
        # The socket's timeout bounds each read; the watchdog shuts the socket at the deadline,
        # which ends a read that keeps receiving a byte just in time.
        expired = threading.Event()
        opened: list[socket.socket] = []
        watchdog = threading.Timer(limit, _shut, (opened, expired))
        watchdog.daemon = True
        watchdog.start()
        keep = answered = False
        try:
            data = None if body is None else json.dumps(body).encode()
            headers = {"Content-Type": "application/json"} if data is not None else {}
            if conn.sock is None:
                conn.connect()
            assert conn.sock is not None
            conn.sock.settimeout(limit)
            opened.append(conn.sock)  # kept: the connection lets go of it on Connection: close
            if inflight is not None:
                inflight.add(conn.sock)
            conn.request(method, self._prefix + path, body=data, headers=headers)
            response = conn.getresponse()
            answered = True
            payload = self._read(response, opened[0], path, deadline)
            keep = not response.will_close
            response.close()  # read to its end: the connection may send the next request
        except (TimeoutError, OSError, http.client.HTTPException) as exc:
            if inflight is not None and inflight.aborted:  # shut by close(), however it read
                raise ServerError(cancelled) from exc
            if expired.is_set() or isinstance(exc, TimeoutError):
                raise ServerError(late) from exc
            if reused and not answered and not (inflight is not None and inflight.aborted):
                raise _Stale from exc  # closed by the server while idle
            if isinstance(exc, ConnectionRefusedError):
                raise ServerError(f"Nothing accepts connections at {self.base_url}.") from exc
            reason = str(exc) or type(exc).__name__
            raise ServerError(f"{where} dropped the connection during {path} ({reason}).") from exc
        finally:
            watchdog.cancel()
            if inflight is not None and opened:
                inflight.discard(opened[0])
            if not (keep and inflight is not None and not expired.is_set() and inflight.keep(conn)):
                conn.close()
        if inflight is not None and inflight.aborted:
            raise ServerError(cancelled)
        if expired.is_set():  # the shut socket read as the end of a cut answer
            raise ServerError(late)
        if response.status != 200:
            raise ServerError(
                f"{where} answered {path} with HTTP {response.status}: {_error_text(payload)}."
            )
        return payload

    def _read(
        self, response: http.client.HTTPResponse, sock: socket.socket, path: str, deadline: float
    ) -> bytes:
        """The response body in chunks, each read within what is left of the deadline."""
        cap = self.max_response_bytes
        too_big = (
            f"The vLLM server at {self.base_url} answered {path} with more than {cap} bytes; "
            "no answer to a request of trl-env is that long."
        )
        declared = response.getheader("Content-Length")
        if declared is not None and declared.strip().isdigit() and int(declared) > cap:
            raise ServerError(too_big)
        chunks: list[bytes] = []
        size = 0
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            sock.settimeout(left)
            chunk = response.read1(CHUNK)
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > cap:
                raise ServerError(too_big)
            chunks.append(chunk)

    def _json(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        inflight: Inflight | None = None,
    ) -> Any:
        payload = self._request(method, path, body, inflight=inflight)
        try:
            return json.loads(payload)
        except ValueError as exc:
            raise ServerError(
                f"The vLLM server at {self.base_url} answered {path} with malformed JSON "
                f"({len(payload)} bytes: {payload[:60]!r})."
            ) from exc

    # -- the requests ---------------------------------------------------------------------
    def health(self, timeout: float = HEALTH_TIMEOUT) -> None:
        """Raise :class:`ServerError` unless ``GET /health`` answers 200 (its body is empty)."""
        self._request("GET", "/health", timeout=timeout)

    def models(self) -> list[str]:
        """The served model names (``GET /v1/models``); requests must name one of them."""
        body = self._json("GET", "/v1/models")
        try:
            return [str(m["id"]) for m in body["data"]]
        except (KeyError, TypeError) as exc:
            raise ServerError(
                f"The vLLM server at {self.base_url} answered /v1/models without a model list."
            ) from exc

    def logprobs_mode(self) -> str | None:
        """The server's ``--logprobs-mode``, or None where ``/server_info`` is not served.

        vLLM serves ``/server_info`` in development mode only (``VLLM_SERVER_DEV_MODE=1``),
        which ``trl vllm-serve`` turns on for its weight-sync endpoints.
        """
        try:
            info = self._json("GET", "/server_info?config_format=json")
            # vLLM (0.32) nests its config under "vllm_config"; a bare one is read too.
            config = info.get("vllm_config", info) if isinstance(info, dict) else info
            return str(config["model_config"]["logprobs_mode"])
        except (ServerError, KeyError, TypeError):
            return None

    def complete(
        self,
        prompt: list[int],
        *,
        model: str,
        max_tokens: int,
        stop_ids: frozenset[int],
        params: SamplingParams,
        seed: int | None = None,
        inflight: Inflight | None = None,
    ) -> Completion:
        """Sample one continuation of ``prompt`` (token ids) under ``params``."""
        body = completion_request(prompt, model, max_tokens, stop_ids, params, seed)
        answer = self._json("POST", "/v1/completions", body, inflight)
        try:
            return parse_completion(answer)
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise ServerError(
                f"The vLLM server at {self.base_url} answered /v1/completions without the token "
                f"ids and logprobs asked for ({type(exc).__name__}: {exc})."
            ) from exc


def completion_request(
    prompt: list[int],
    model: str,
    max_tokens: int,
    stop_ids: frozenset[int],
    params: SamplingParams,
    seed: int | None,
) -> dict[str, Any]:
    """The JSON body of ``POST /v1/completions``: TRL's ``VLLMClient.generate`` fields, one prompt.

    ``ignore_eos`` with ``stop_token_ids`` makes the turn end at exactly the engine's stop ids
    (which include the model's end-of-sequence ids): vLLM would otherwise also stop at the ids
    of the server's own generation config, which may differ.
    """
    body: dict[str, Any] = {
        "model": model,
        "prompt": prompt,
        "n": 1,
        "max_tokens": max_tokens,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "top_k": params.top_k,
        "min_p": params.min_p,
        "repetition_penalty": params.repetition_penalty,
        "logprobs": 0,
        "return_token_ids": True,
        "return_tokens_as_token_ids": True,
        "stop_token_ids": sorted(stop_ids),
        "ignore_eos": True,
    }
    if seed is not None:
        body["seed"] = seed
    return body


def parse_completion(answer: Any) -> Completion:
    """The one choice of a completions answer; raises if ids and logprobs do not line up.

    With ``return_tokens_as_token_ids`` each logprob entry names its token as ``token_id:N``;
    checking those against ``token_ids`` catches a server that answered something else.
    """
    choices = answer["choices"]
    if len(choices) != 1:
        raise ValueError(f"{len(choices)} choices for one prompt")
    choice = choices[0]
    ids = [int(t) for t in choice["token_ids"]]
    logprobs = choice["logprobs"]
    values = [float("nan") if v is None else float(v) for v in logprobs["token_logprobs"]]
    named = [int(str(t).removeprefix("token_id:")) for t in logprobs["tokens"]]
    if named != ids or len(values) != len(ids):
        raise ValueError("the logprob entries do not match the sampled ids")
    return Completion(ids, values, str(choice.get("finish_reason")))


def _shut(opened: list[socket.socket], expired: threading.Event) -> None:
    """End whatever the request's socket waits for: its deadline has passed."""
    expired.set()
    for sock in opened:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already closed


def _error_text(payload: bytes) -> str:
    """The message of an error answer (vLLM: ``{"error": {"message": ...}}``), kept short."""
    try:
        body = json.loads(payload)
        error = body.get("error", body) if isinstance(body, dict) else body
        message = error.get("message", error) if isinstance(error, dict) else error
        text = str(message)
    except ValueError:
        text = payload.decode(errors="replace")
    text = " ".join(text.split()).rstrip(".") or "no message"  # the caller ends the sentence
    return text if len(text) <= 300 else text[:300] + " [cut]"


def cut(ids: list[int], logprobs: list[float], limit: int, stop_ids: frozenset[int]) -> Sample:
    """Keep ids up to and including the first stop id, and at most ``limit`` of them.

    The ids after a cut were sampled after the kept ones, so what is kept is exactly what a
    request with that stop set and limit would have drawn.
    """
    end = next((i + 1 for i, t in enumerate(ids) if t in stop_ids), None)
    stopped = end is not None and end <= limit
    keep = end if stopped else min(limit, len(ids))
    return Sample(ids[:keep], logprobs[:keep], stopped)


def request_seed(key: int, turn: int) -> int:
    """A per-request seed from a row's stream key (:func:`~.base.stream_key`) and its turn:
    reproducible for a seeded run, different for every row and turn.

    The members of a GRPO group send the same prompt; one shared seed would give them the same
    sample.
    """
    return stream_key(key, turn) >> 32  # 31 bits: fits every seed type on the server


class VLLMServerBackend:
    """A :class:`~trl_env.backends.base.Backend` over a running vLLM server."""

    def __init__(
        self,
        client: VLLMServerClient,
        model: str,
        concurrency: int = DEFAULT_CONCURRENCY,
        vocab_size: int | None = None,
    ) -> None:
        self.client = client
        self.model = model
        self.concurrency = concurrency
        self.vocab_size = vocab_size  # the ids the model has, when known

    @classmethod
    def connect(
        cls,
        base_url: str,
        timeout: float = DEFAULT_TIMEOUT,
        concurrency: int = DEFAULT_CONCURRENCY,
        model: str | None = None,
        vocab_size: int | None = None,
    ) -> VLLMServerBackend:
        """Check that the server is up and learn its model name; raises :class:`ServerError`."""
        client = VLLMServerClient(base_url, timeout)
        try:
            client.health()
        except ServerError as exc:
            raise ServerError(
                f"{str(exc).rstrip('.')}; start a server there with `trl vllm-serve --model "
                "MODEL` (or `vllm serve`), or point --vllm-server-base-url at one."
            ) from exc
        if model is None:
            served = client.models()
            if not served:
                raise ServerError(f"The vLLM server at {client.base_url} serves no model.")
            model = served[0]
        mode = client.logprobs_mode()
        if mode is None:
            log.warning(
                "The vLLM server at %s does not say which logprobs it reports; trl-env expects "
                "processed ones (`--logprobs-mode processed_logprobs`, as `trl vllm-serve` runs).",
                client.base_url,
            )
        elif mode != PROCESSED:
            raise ServerError(
                f"The vLLM server at {client.base_url} reports {mode}, not the processed logprobs "
                f"TRL's correction needs; restart it with `--logprobs-mode {PROCESSED}` (as "
                "`trl vllm-serve` does)."
            )
        return cls(client, model, concurrency, vocab_size)

    def session(self, params: SamplingParams) -> VLLMServerSession:
        session = VLLMServerSession(self.client, self.model, params, self.concurrency)
        session.vocab_size = self.vocab_size  # checked by the engine (check_sample)
        return session


class VLLMServerSession:
    """Rows as token histories on this side; the server keeps nothing between requests."""

    def __init__(
        self, client: VLLMServerClient, model: str, params: SamplingParams, concurrency: int
    ) -> None:
        self.client, self.model, self.params = client, model, params
        self.vocab_size: int | None = None
        self.history: dict[int, list[int]] = {}
        self.turns: dict[int, int] = {}
        self.keys: dict[int, int] = {}
        self.lock = threading.Lock()  # the engine may call generate for disjoint rows at once
        self.inflight = Inflight()  # closing the session cuts off its requests
        self.pool = ThreadPoolExecutor(max(1, concurrency), thread_name_prefix="vllm-request")

    def generate(self, turns: Sequence[Turn], stop_ids: frozenset[int]) -> list[Sample]:
        futures = [self.submit(turn, stop_ids) for turn in turns]
        return [f.result() for f in futures]

    def submit(self, turn: Turn, stop_ids: frozenset[int]) -> Future[Sample]:
        """One row's turn as its own request (a :class:`~.base.Session`'s optional ``submit``)."""
        with self.lock:
            history = self.history.setdefault(turn.row, [])
            history += turn.new_ids
            count = self.turns[turn.row] = self.turns.get(turn.row, -1) + 1
            seed = None
            if self.params.seed is not None:
                key = self.keys.get(turn.row)
                key = stream_key(self.params.seed, turn.row) if key is None else key
                seed = request_seed(key, count)
            prompt = list(history)
        return self.pool.submit(self._turn, turn.row, prompt, turn.max_new_tokens, stop_ids, seed)

    def _turn(
        self, row: int, prompt: list[int], limit: int, stop_ids: frozenset[int], seed: int | None
    ) -> Sample:
        sample = self._one(prompt, limit, stop_ids, seed)
        with self.lock:
            # a failed row's episode ends: its history is not extended
            if not sample.error and row in self.history:
                self.history[row] += sample.ids
        return sample

    def streams(self, keys: Mapping[int, int]) -> None:
        """Each row's random stream key: its requests' seeds derive from it and the turn."""
        with self.lock:
            self.keys.update(keys)

    def _one(
        self, prompt: list[int], limit: int, stop_ids: frozenset[int], seed: int | None
    ) -> Sample:
        if limit <= 0:  # vLLM refuses max_tokens 0; the turn is empty by definition
            return Sample()
        try:
            done = self.client.complete(
                prompt,
                model=self.model,
                max_tokens=limit,
                stop_ids=stop_ids,
                params=self.params,
                seed=seed,
                inflight=self.inflight,
            )
        except ServerError as exc:
            return Sample(error=str(exc))
        return cut(done.ids, done.logprobs, limit, stop_ids)

    def release(self, rows: Sequence[int]) -> None:
        with self.lock:
            for row in rows:
                self.history.pop(row, None)
                # ``turns`` is kept: a row id used again draws new seeds, not its old ones

    def close(self) -> None:
        """Forget every row and cut off the requests still waiting for the server."""
        self.inflight.abort()
        self.pool.shutdown(wait=False, cancel_futures=True)
        with self.lock:
            self.history.clear()
            self.turns.clear()

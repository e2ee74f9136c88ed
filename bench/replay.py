"""The limit of a multi-turn client of a vLLM server: a rollout's own requests, replayed.

Each episode's generation requests (its prompt ids at that turn, ``max_tokens`` the number of
ids the turn sampled, ``ignore_eos``) are sent again by a minimal asyncio client: one kept-alive
connection per episode, each request the moment the one before it in its episode returns, all
episodes at once, with no env, tokenizer, processor or scheduler in between. A rollout's
tokens/s over the replay's is how close trl-env comes to what the server can do for the same
multi-turn work. Used by bench/vllm_cpu.py and bench/gpu.py.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.parse
from typing import Any


def requests_of(episode: Any) -> list[tuple[list[int], int]]:
    """The (prompt ids, sampled length) of each of an episode's generation requests: a run of
    sampled ids (mask 1) was asked for with everything before it as the prompt."""
    ids = list(episode.prompt_ids) + list(episode.completion_ids)
    mask = [0] * len(episode.prompt_ids) + list(episode.env_mask)
    out: list[tuple[list[int], int]] = []
    start = None
    for i, m in enumerate([*mask, 0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            out.append((ids[:start], i - start))
            start = None
    return out


async def _post(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str, body: dict[str, Any]
) -> dict[str, Any]:
    """One ``POST /v1/completions`` on a kept-alive connection; the answer's JSON."""
    data = json.dumps(body).encode()
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n\r\n"
    )
    writer.write(head.encode() + data)
    await writer.drain()
    status = await reader.readline()
    length = None
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    if length is None or b" 200 " not in status:
        raise RuntimeError(f"replay: the server answered {status!r} without a sized body")
    answer: dict[str, Any] = json.loads(await reader.readexactly(length))
    return answer


async def _replay(url: str, model: str, chains: list[list[tuple[list[int], int]]]) -> int:
    parts = urllib.parse.urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80

    async def chain(requests: list[tuple[list[int], int]], row: int) -> int:
        reader, writer = await asyncio.open_connection(host, port)
        made = 0
        try:
            for turn, (prompt, tokens) in enumerate(requests):
                body = {
                    "model": model,
                    "prompt": prompt,
                    "max_tokens": tokens,
                    "ignore_eos": True,
                    "temperature": 1.0,
                    "logprobs": 0,
                    "return_token_ids": True,
                    "return_tokens_as_token_ids": True,
                    "seed": row * 1000 + turn,
                }
                answer = await _post(reader, writer, f"{host}:{port}", body)
                made += len(answer["choices"][0]["token_ids"])
        finally:
            writer.close()
        return made

    counts = await asyncio.gather(*(chain(c, i) for i, c in enumerate(chains)))
    return sum(counts)


def replay(url: str, model: str, chains: list[list[tuple[list[int], int]]]) -> dict[str, Any]:
    """Each episode's requests again, in order, the episodes at once; tokens and seconds."""
    started = time.perf_counter()
    tokens = asyncio.run(_replay(url, model, chains))
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "tokens": tokens, "tokens_per_s": tokens / seconds}

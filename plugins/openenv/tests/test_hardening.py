"""What a hostile or broken OpenEnv server cannot do to the client: drive the terminal through
`trl-env openenv URL`, make the trainer hold a huge reply, or hold the /health probe with a
slow drip."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from trl_env.terminal import printable
from trl_env_openenv import ConnectionLostError, OpenEnvEnv
from trl_env_openenv.diagnose import _probe

TRL_ENV = str(Path(sys.executable).parent / "trl-env")
CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


@pytest.mark.parametrize(
    "raw, shown",
    [
        ("a\x1b[2Jb", "ab"),  # clear screen
        ("x\x1b]0;title\x07y", "xy"),  # window title
        ("c\x1b]52;c;aGVsbG8=\x07d", "cd"),  # OSC 52: write the clipboard
        ("e\x1b]52;c;Zm9v\x1b\\f", "ef"),  # the same, ended by ST
        ("z\x9b31mq", "zq"),  # an 8-bit CSI
        ("line\rover", "line\\rover"),  # a carriage return would overwrite the line
        ("keep\ttabs\nand lines", "keep\ttabs\nand lines"),
    ],
)
def test_printable_drops_control_sequences(raw, shown):
    assert printable(raw) == shown


def test_the_probe_prints_no_escape_sequence(game_url):
    sent = "say \x1b]52;c;aGk=\x07\x1b[2Jhello\x1b]0;owned\x07\rworld\x9b1m"
    result = subprocess.run(
        [TRL_ENV, "openenv", game_url, "--action", sent, "--env-arg", "observation_field=text"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    reply = result.stdout.split("Reply to", 1)[1].split("\n", 1)[1]
    assert "hello\\rworld" in reply
    assert not CONTROLS.search(reply.replace("\n", "")), repr(reply)


def test_a_reply_over_max_reply_mb_ends_the_episode_in_one_sentence(game_url):
    env = OpenEnvEnv(url=game_url, observation_field="text")  # 4 MB by default
    try:
        env.reset("1")
        with pytest.raises(ConnectionLostError) as failure:
            env.step("big 12")
        assert "larger than 4 MB (option max_reply_mb)" in str(failure.value)
        assert str(failure.value).count(". ") == 0  # one sentence
        assert not env.alive
    finally:
        env.close()
    bigger = OpenEnvEnv(url=game_url, observation_field="text", max_reply_mb=16)
    try:
        bigger.reset("1")
        assert len(bigger.step("big 12")) == 12 * 2**20
    finally:
        bigger.close()


def test_a_slow_drip_cannot_hold_the_health_probe():
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def drip() -> None:
        conn, _ = listener.accept()
        with conn:
            for byte in b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n" + b"{" * 999:
                if stop.wait(0.2):
                    return
                conn.sendall(bytes([byte]))

    threading.Thread(target=drip, daemon=True).start()
    answer: list[str] = []
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/health"
    probe = threading.Thread(target=lambda: answer.append(_probe(url, 1.0)), daemon=True)
    probe.start()
    probe.join(60)  # each byte comes before a per-read timeout of 1 s would strike
    stop.set()
    listener.close()
    assert not probe.is_alive(), "the drip held the probe"
    assert answer and "no complete answer within 1 s" in answer[0]
    time.sleep(0)  # the drip thread ends at its next wait

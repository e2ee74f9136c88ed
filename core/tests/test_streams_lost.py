"""A pinned stream whose reader went away (a pipe closed, a terminal hung up) drops what is
written to it instead of raising, once points its descriptor at /dev/null, and says so once."""

from __future__ import annotations

import errno
import io
import os
import sys

import pytest

from trl_env import streams


def pin(monkeypatch, stdout, stderr):
    """Pin these as the command's streams, as the CLI does when a command starts (in the test's
    body: pytest puts its own capture back between a fixture and the test)."""
    monkeypatch.setattr(sys, "stdout", stdout)
    monkeypatch.setattr(sys, "stderr", stderr)
    monkeypatch.setattr(streams, "_pinned", None)
    streams.pin()


def test_a_write_to_a_closed_pipe_is_dropped_and_heard_of_once(monkeypatch):
    read, write = os.pipe()
    os.close(read)  # as after `train | tee` lost its tee
    pipe = os.fdopen(write, "w")
    heard: list[str] = []
    try:
        pin(monkeypatch, pipe, io.StringIO())
        stop = streams.on_lost(heard.append)
        print("step 1/9", file=streams.out(), flush=True)  # before: BrokenPipeError
        print("step 2/9", flush=True)  # sys.stdout is the same guarded stream
        stop()
        assert heard == ["stdout"]
        assert sys.stdout is streams.out() and streams.out().gone
        devnull, now = os.stat(os.devnull), os.fstat(pipe.fileno())
        assert (now.st_dev, now.st_ino) == (devnull.st_dev, devnull.st_ino)
        print("on stderr", file=streams.err())
        assert streams.err().getvalue() == "on stderr\n"  # the other stream is untouched
        late: list[str] = []
        streams.on_lost(late.append)()  # one who asks after the loss hears of it at once
        assert late == ["stdout"]
    finally:
        monkeypatch.undo()
        pipe.close()


class Full(io.StringIO):
    def write(self, text: str) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")


def test_any_other_error_is_raised_as_it_was(monkeypatch):
    pin(monkeypatch, Full(), io.StringIO())
    try:
        with pytest.raises(OSError, match="No space left"):
            print("x", file=streams.out())
        assert not streams.out().gone
    finally:
        monkeypatch.undo()

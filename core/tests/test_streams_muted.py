"""streams.muted drops only the prints of the threads inside it."""

from __future__ import annotations

import io
import sys
import threading

from trl_env.streams import muted


def test_muted_drops_only_the_calling_threads_prints(monkeypatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    inside, printed = threading.Event(), threading.Event()

    def other() -> None:
        inside.wait(10)
        print("from the other thread")
        printed.set()

    worker = threading.Thread(target=other)
    worker.start()
    with muted():
        print("from the muted thread")
        inside.set()
        assert printed.wait(10)
    worker.join(10)
    print("after the block")
    assert out.getvalue() == "from the other thread\nafter the block\n"
    assert sys.stdout is out  # the filter is gone once no thread is inside


def test_nested_blocks_keep_muting_until_the_outer_one_ends(monkeypatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    with muted():
        with muted():
            print("inner")
        print("outer")
    print("free")
    assert out.getvalue() == "free\n"

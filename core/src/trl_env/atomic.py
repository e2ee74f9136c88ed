"""A directory that appears whole or not at all: built beside its place, then renamed into it."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path


@contextlib.contextmanager
def building(final: Path, whole: Callable[[Path], bool] = Path.is_dir) -> Iterator[Path]:
    """A fresh directory beside ``final`` to build it in; renamed to ``final`` when the block
    ends without an error, removed in any case.

    The rename is atomic, so concurrent builders (test workers, processes sharing a cache) race
    safely: where another one got there first (``whole(final)``), its copy is kept.
    """
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=final.name + ".", dir=final.parent))
    try:
        yield tmp
        try:
            tmp.rename(final)
        except OSError:
            if not whole(final):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

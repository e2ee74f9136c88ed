"""Suite-wide settings: one torch thread per process, and a per-test time limit that stretches
with the machine's load.

`make test` gives pytest-timeout a limit per test (``--timeout``) to end a hang; on a busy
machine a correct test can take longer than that, so the limit is scaled like every other
limit of the suite (:func:`trl_env.testing.timeouts.scaled`).
"""

from __future__ import annotations

import os

import pytest

# `make test` runs two xdist workers on two cores. With torch's default of one OpenMP thread per
# core in every worker and every subprocess, the cores were oversubscribed and spinning OpenMP
# threads burnt CPU: the suite's user time fell from 17-19 min to about 12 with one thread each.
# Set before any test imports torch; workers and subprocesses inherit it; a value given wins.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.hookimpl(trylast=True)  # after pytest-timeout has read --timeout
def pytest_configure(config: pytest.Config) -> None:
    limit = getattr(config, "_env_timeout", None)
    if limit:
        from trl_env.testing.timeouts import scaled

        config._env_timeout = scaled(limit)  # type: ignore[attr-defined]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``xdist_group`` marks, honoured again under ``--dist loadgroup``.

    pytest-xdist 3.8 groups a test by renaming it ``NODEID@GROUP`` through ``item._nodeid``,
    which pytest 9 no longer reads (a node's id is ``item._id``): every group was silently split
    across workers (two vLLM servers, a module fixture built once per worker). This does the same
    renaming where pytest 9 reads it; with an older pytest, xdist's own renaming already did.
    """
    if not getattr(config.option, "loadgroup", False):  # set in xdist workers
        return
    try:
        from _pytest.nodeid import coerce_node_id
    except ImportError:  # pytest < 9: xdist's renaming works
        return
    for item in items:
        names = {
            str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
            for mark in item.iter_markers("xdist_group")
        }
        if names and "@" not in item.nodeid:
            item._id = coerce_node_id(f"{item.nodeid}@{'_'.join(sorted(names))}")  # type: ignore[attr-defined]

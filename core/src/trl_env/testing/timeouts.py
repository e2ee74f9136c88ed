"""Test time limits that a busy machine does not break while the code is correct.

A limit in a test only guards against a hang; it must never be what fails on a slow machine.
:func:`scaled` stretches a limit by the machine's load per core (a load of 10 on 2 cores makes
each second five) and by ``TRL_ENV_TEST_TIMEOUT_SCALE`` (default 1) for machines slower still.
"""

from __future__ import annotations

import os


def load_factor() -> float:
    """The 1-minute load average per core, at least 1 (1 where the platform has none)."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return 1.0
    return max(1.0, load / (os.cpu_count() or 1))


def scaled(seconds: float) -> float:
    """``seconds`` as a limit for this machine now: stretched by load and by the env var."""
    try:
        factor = float(os.environ.get("TRL_ENV_TEST_TIMEOUT_SCALE", "1"))
    except ValueError:
        factor = 1.0
    return seconds * max(factor, 0.1) * load_factor()

"""Suite-wide settings: the per-test time limit stretches with the machine's load.

`make test` gives pytest-timeout a limit per test (``--timeout``) to end a hang; on a busy
machine a correct test can take longer than that, so the limit is scaled like every other
limit of the suite (:func:`trl_env.testing.timeouts.scaled`).
"""

from __future__ import annotations

import pytest


@pytest.hookimpl(trylast=True)  # after pytest-timeout has read --timeout
def pytest_configure(config: pytest.Config) -> None:
    limit = getattr(config, "_env_timeout", None)
    if limit:
        from trl_env.testing.timeouts import scaled

        config._env_timeout = scaled(limit)  # type: ignore[attr-defined]

"""openenv-core is imported without its Gradio web UI, which trl-env never serves."""

from __future__ import annotations

import subprocess
import sys

from trl_env.testing.timeouts import scaled

_PROBE = """
import sys
import trl_env_openenv.server, trl_env_openenv.session
import importlib.util
UI = "openenv.core.env_server.web_interface"
print("gradio" in sys.modules, UI in sys.modules)
print(importlib.util.find_spec(UI) is not None)
"""


def test_the_web_ui_is_held_back_while_openenv_loads_then_released() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=scaled(180)
    )
    assert proc.returncode == 0, proc.stderr
    # client and server loaded without Gradio, and the UI module is released: not held as None
    # in sys.modules, and found by a later import (not run here: it would load Gradio)
    assert proc.stdout.split() == ["False", "False", "True"], proc.stdout

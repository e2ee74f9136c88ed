"""openenv-core is imported without its Gradio web UI, which trl-env never serves."""

from __future__ import annotations

import subprocess
import sys

from trl_env.testing.timeouts import scaled

_PROBE = """
import sys
import trl_env_openenv.server, trl_env_openenv.session
print("gradio" in sys.modules, "openenv.core.env_server.web_interface" in sys.modules)
from openenv.core.env_server.web_interface import create_web_interface_app
print(callable(create_web_interface_app), "gradio" in sys.modules)
"""


def test_the_web_ui_is_held_back_while_openenv_loads_then_released() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=scaled(180)
    )
    assert proc.returncode == 0, proc.stderr
    # client and server loaded without Gradio; a later import of the UI module still works
    assert proc.stdout.split() == ["False", "False", "True", "True"], proc.stdout

"""Python code-execution environment for trl-env (entry point ``python``), and its sandbox."""

from .code_blocks import Code, extract_code
from .env import PythonEnv
from .sandbox import Limits, RunResult, Sandbox, capabilities
from .tasks import PROBLEMS

__all__ = [
    "PROBLEMS",
    "Code",
    "Limits",
    "PythonEnv",
    "RunResult",
    "Sandbox",
    "capabilities",
    "extract_code",
]

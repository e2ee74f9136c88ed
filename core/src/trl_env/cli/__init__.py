"""The ``trl-env`` command line. Command modules import heavy libraries inside their functions."""

from .main import cli, main

__all__ = ["cli", "main"]

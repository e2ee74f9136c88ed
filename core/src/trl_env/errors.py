"""User-facing errors: the CLI prints their message as one sentence and exits non-zero."""

from __future__ import annotations


class TrlEnvError(Exception):
    """An error the user can fix; its message is shown without a traceback."""

    exit_code = 1


class UsageError(TrlEnvError):
    """Bad options or arguments."""

    exit_code = 2


class PluginNotFoundError(TrlEnvError, LookupError):
    """No installed or registered plugin has that name."""

    exit_code = 2  # a name the user typed: a usage error, as bad values are


class PluginLoadError(TrlEnvError, ImportError):
    """A plugin is installed but could not be imported or built."""


class PluginOptionError(PluginLoadError):
    """A plugin's factory refused the options given to it (unknown name, wrong type)."""

    exit_code = 2


class DuplicatePluginError(TrlEnvError):
    """Two distributions register the same name."""


class ProtocolError(TrlEnvError, TypeError):
    """An object does not satisfy the protocol it was registered for."""


class TokenizerMismatchError(TrlEnvError):
    """A processor does not fit the model's tokenizer."""

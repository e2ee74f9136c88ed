"""Every exception trl-env raises on purpose, in two kinds.

User-facing errors (:class:`TrlEnvError`): the CLI prints their message as one sentence and exits
non-zero. Env faults (:class:`EnvFault`): env code failed one call; the engine ends that episode
with the message and the run goes on.
"""

from __future__ import annotations


class TrlEnvError(Exception):
    """An error the user can fix; its message is shown without a traceback."""

    exit_code = 1


class OutputError(TrlEnvError):
    """A run's files could not be written (a full disk, a quota); what was written is kept."""

    @classmethod
    def disk_full(cls, where: object, exc: BaseException) -> OutputError | None:
        """The one-sentence error when ``exc`` (or what caused it) is a full disk, else None."""
        import errno

        seen: set[int] = set()
        cause: BaseException | None = exc
        while cause is not None and id(cause) not in seen:
            seen.add(id(cause))
            if isinstance(cause, OSError) and cause.errno in (errno.ENOSPC, errno.EDQUOT):
                why = cause.strerror or "no space left on device"
                return cls(f"Writing to {where} failed: {why}; free some space and run again.")
            # safetensors and torch.save report it in their own exceptions, without the OSError
            text = str(cause)
            if "No space left on device" in text or (
                isinstance(cause, RuntimeError) and "write failed" in text
            ):
                return cls(
                    f"Writing to {where} failed: No space left on device; free some space and "
                    "run again."
                )
            cause = cause.__cause__ or cause.__context__
        return None


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
    """A processor does not fit the model's tokenizer; ``fits_with`` names the processor option
    (``KEY=VALUE``) with which it does, where one of its variants fits."""

    def __init__(self, message: str, fits_with: str | None = None) -> None:
        super().__init__(message)
        self.fits_with = fits_with


def describe(exc: BaseException) -> str:
    """A plugin's failure as ``Type: message``, and what a ``SystemExit`` during an import means."""
    if isinstance(exc, SystemExit):
        return f"it called sys.exit({exc.code!r}) while importing"
    return f"{type(exc).__name__}: {exc}"


# -- env faults: one episode ends, never the run -----------------------------------------------
class EnvFault(Exception):
    """Env code failed a call into it; the message says how (it may quote env text)."""


class EnvMisbehaved(EnvFault):
    """An env broke its contract (wrong type, non-finite reward, ...); the message says how."""


class IsolationError(EnvFault):
    """An env call in a worker process did not return a value."""


class EnvTimeout(IsolationError):
    """The call ran past its timeout; its worker process was killed."""


class EnvCrashed(IsolationError):
    """The worker process died during the call (a signal or an exit code says how)."""


class EnvRaised(IsolationError):
    """The env code raised; ``type_name`` and ``message`` are those of its exception."""

    def __init__(self, type_name: str, message: str, where: str = "") -> None:
        super().__init__(f"{type_name}: {message}" if message else type_name)
        self.type_name, self.message, self.where = type_name, message, where

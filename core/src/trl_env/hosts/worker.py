"""The env's worker process: build envs from the trainer's first message and run their calls.

Started by :mod:`trl_env.hosts.launch` as a fresh interpreter; it reads requests from its socket
(:mod:`trl_env.hosts.frames`), runs each in the env, and sends back plain data or what the env
raised. It is a child subreaper that dies with its parent (:mod:`trl_env.hosts.tree`).
"""

from __future__ import annotations

import base64
import functools
import os
import pickle
import socket
import sys
import traceback
from collections.abc import Callable
from typing import Any

from .frames import BadReply, receive, send
from .tree import become_subreaper, end_programs, exit_with_parent


def serve(fd: int) -> None:
    sock = socket.socket(fileno=fd)
    become_subreaper()
    exit_with_parent(os.getppid())
    make: Callable[[dict[str, Any] | None], Any] | None = None
    failure: tuple[str, str, str] | None = None
    try:
        make = _maker_from(receive(sock, None, 2**40))
    except BaseException as exc:
        failure = _describe_exc(exc)
    env: Any = None
    while True:
        try:
            message = receive(sock, None, 2**40)
        except (EOFError, OSError, BadReply):
            end_programs()
            os._exit(0)  # without joining threads the env may have left running
        op = message[0]
        if op == "drop":
            env = None
            end_programs()
            continue
        if failure is not None:
            _reply(sock, ("raised", *failure), op)
        elif op == "ready":
            _reply(sock, ("ok", None), op)
        elif op == "open":  # ["open"], or ["open", options]: the pool's own, or these
            env = None
            end_programs()
            assert make is not None
            options = unpickled(message[1]) if len(message) > 1 else None
            outcome = _run(functools.partial(make, options))
            if outcome[0] == "ok":
                env, outcome = outcome[1], ("ok", None)
            _reply(sock, outcome, "the env factory")
        elif op == "has":  # whether the env has a method by this name (an extra it may lack)
            _reply(sock, ("ok", callable(getattr(env, message[1], None))), op)
        else:
            _, method, args = message
            outcome = _run(functools.partial(_invoke, env, method, tuple(args)))
            _reply(sock, outcome, method)


def _maker_from(init: list[Any]) -> Callable[[dict[str, Any] | None], Any]:
    """What makes an env from the first message: given options, or those the message holds."""
    _, path, cwd, main, data = init
    sys.path[:] = path
    try:
        os.chdir(cwd)
    except OSError:  # another user may not enter it; relative paths then start at /
        pass
    if main is not None:
        _load_main(*main)
    name, factory, options = unpickled(data)  # the trainer's own message
    if name is None:
        label = f"The env factory {describe_factory(factory)}"
        return lambda given: _checked(functools.partial(factory, **(given or {})), label)
    from ..registry import envs

    if factory is None:
        factory = envs.factory(name)  # the env's module is imported here, in the worker
    return lambda given: envs.build(name, factory, options if given is None else given)


def pickled(value: Any) -> str:
    """``value`` as the trainer sends its own data to a worker (never the other way)."""
    return base64.b64encode(pickle.dumps(value)).decode("ascii")


def unpickled(text: str) -> Any:
    return pickle.loads(base64.b64decode(text))


def _load_main(kind: str, where: str) -> None:
    import runpy
    import types

    module = types.ModuleType("__mp_main__")
    if kind == "module":
        module.__dict__.update(runpy.run_module(where, run_name="__mp_main__"))
    else:
        module.__dict__.update(runpy.run_path(where, run_name="__mp_main__"))
    sys.modules["__main__"] = sys.modules["__mp_main__"] = module


def _checked(factory: Callable[[], Any], label: str) -> Any:
    from ..protocols import not_an_env

    env = factory()
    problem = not_an_env(env, label)
    if problem:
        raise TypeError(problem)
    return env


def _invoke(env: Any, method: str, args: tuple[Any, ...]) -> Any:
    if method == "close":
        closer = getattr(env, "close", None)
        return closer() if callable(closer) else None
    if method in ("reset", "step"):
        return getattr(env, method)(*args)
    value = getattr(env, method, None)
    return value(*args) if callable(value) else value


def _run(call: Callable[[], Any]) -> tuple[Any, ...]:
    try:
        return ("ok", call())
    except BaseException as exc:  # SystemExit included: it ends the call, not the worker
        return ("raised", *_describe_exc(exc))


def _describe_exc(exc: BaseException) -> tuple[str, str, str]:
    frames = traceback.extract_tb(exc.__traceback__)
    where = f"{frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name}" if frames else ""
    try:
        message = str(exc)
    except Exception:  # a __str__ that raises
        message = f"<{type(exc).__name__} whose message cannot be read>"
    return type(exc).__name__, message, where


def plain(value: Any, depth: int = 0) -> Any:
    """``value`` as plain JSON data, or TypeError. numpy and torch scalars become Python ones."""
    if value is None or type(value) in (bool, int, float, str):
        return value
    if depth > 32:
        raise TypeError("it is nested too deeply")
    if isinstance(value, str):
        return str.__str__(value)  # a subclass's methods may lie; its characters do not
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int.__index__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, list | tuple):
        return [plain(item, depth + 1) for item in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {str.__str__(k): plain(v, depth + 1) for k, v in value.items()}
    item = getattr(value, "item", None)  # numpy's and torch's scalars (shape () both)
    if callable(item) and getattr(value, "shape", None) == ():
        inner = item()
        if type(inner) in (bool, int, float):
            return inner
    raise TypeError(f"a {type(value).__name__} is not plain data")


def _reply(sock: socket.socket, outcome: tuple[Any, ...], what: str) -> None:
    if outcome[0] == "ok":
        try:
            outcome = ("ok", plain(outcome[1]))
        except TypeError as exc:
            outcome = (
                "unsendable",
                f"the env's {what} returned {type(outcome[1]).__name__}, not str or other plain "
                f"data ({exc}); only str, numbers, bool, None, lists and dicts cross from its "
                "worker process",
            )
    try:
        send(sock, list(outcome))
    except (OSError, ValueError):
        os._exit(0)  # the parent is gone


def describe_factory(factory: Callable[..., Any]) -> str:
    if isinstance(factory, functools.partial):
        return f"partial({describe_factory(factory.func)})"
    return getattr(factory, "__qualname__", None) or type(factory).__name__

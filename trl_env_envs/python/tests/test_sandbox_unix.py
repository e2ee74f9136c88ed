"""Unix-domain sockets: a host service listening on a world-writable socket under /tmp is out of
reach of the sandboxed program (a new network namespace does not cut those: they are files)."""

from __future__ import annotations

import os
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from trl_env_python.sandbox import Sandbox

SECRET = uuid.uuid4().hex


@pytest.fixture
def host_socket() -> Iterator[tuple[str, list[bytes]]]:
    """A listener on a 0777 socket in /tmp that answers SECRET and keeps what it was sent."""
    path = os.path.join(tempfile.gettempdir(), f"trl-env-host-{uuid.uuid4().hex[:8]}.sock")
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    os.chmod(path, 0o777)
    server.listen(4)
    server.settimeout(0.2)
    heard: list[bytes] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(2.0)
                conn.sendall(SECRET.encode())
                try:
                    heard.append(conn.recv(100))
                except OSError:
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield path, heard
    finally:
        stop.set()
        thread.join(5)
        server.close()
        os.unlink(path)


def _python_under_a_socket_dir() -> bool:
    """The sandbox cannot lay a fresh tmpfs over /tmp when the interpreter lives there (a
    checkout under /tmp); it then reports ``private_tmp`` as not applied, and seccomp alone
    keeps host sockets out of reach."""
    import sys

    prefix = os.path.realpath(sys.prefix)
    dirs = {os.path.realpath(d) for d in ("/tmp", "/run", "/var/run") if os.path.isdir(d)}
    return any(prefix == d or prefix.startswith(d + os.sep) for d in dirs)


def client(path: str) -> str:
    return (
        "import socket\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        f"s.connect({path!r})\n"
        "print('got', s.recv(100).decode())\n"
        "s.sendall(b'from the sandbox')\n"
    )


def test_the_listener_is_reachable_without_the_new_steps(host_socket):
    """The control: the same program does reach it when both steps are off."""
    path, heard = host_socket
    result = Sandbox(deny_unix_sockets=False, filesystem=False, drop_user=False).run(client(path))
    assert result.ok, result.text()
    assert f"got {SECRET}" in result.output
    end = time.monotonic() + 5.0  # the listener reads after the program has gone
    while not heard and time.monotonic() < end:
        time.sleep(0.02)
    assert heard == [b"from the sandbox"]
    assert "unix_sockets_denied" not in result.isolation


def test_a_sandboxed_program_cannot_reach_a_host_unix_socket(host_socket, need: Callable):
    path, heard = host_socket
    result = Sandbox().run(client(path))
    assert SECRET not in result.output and heard == []
    assert result.status == "error"
    assert result.isolation["unix_sockets_denied"] is True
    need("mount_namespace")
    if _python_under_a_socket_dir():
        assert result.isolation["private_tmp"] is not True  # said truthfully
    else:
        assert result.isolation["private_tmp"] is True


def test_each_step_alone_keeps_the_socket_out_of_reach(host_socket, need: Callable):
    path, heard = host_socket
    seccomp_only = Sandbox(filesystem=False, drop_user=False).run(client(path))
    assert "Operation not permitted" in seccomp_only.output and heard == []
    need("mount_namespace")
    if _python_under_a_socket_dir():
        pytest.skip("the interpreter lives under /tmp, /run or /var/run: no private /tmp")
    tmpfs_only = Sandbox(deny_unix_sockets=False).run(client(path))
    assert "No such file or directory" in tmpfs_only.output and heard == []
    assert tmpfs_only.isolation["private_tmp"] is True


def test_what_programs_need_still_works():
    """A connected stream pair (asyncio's self-pipe, subprocess) reaches nothing and stays
    allowed; a datagram pair could sendto any socket path and is refused; so is io_uring."""
    code = (
        "import asyncio, socket\n"
        "a, b = socket.socketpair()\n"
        "a.sendall(b'x'); print('pair', b.recv(1))\n"
        "print('loop', asyncio.run(asyncio.sleep(0, 'ok')))\n"
        "try:\n"
        "    socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)\n"
        "    print('dgram allowed')\n"
        "except PermissionError:\n"
        "    print('dgram refused')\n"
    )
    result = Sandbox().run(code)
    assert result.ok, result.text()
    assert "pair b'x'" in result.output and "loop ok" in result.output
    assert "dgram refused" in result.output

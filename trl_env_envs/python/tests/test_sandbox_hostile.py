"""Hostile programs: the trainer (this process) survives, each run ends with a readable result,
and nothing of the run is left behind.

Limits are small so the suite stays fast; the fork bomb only runs once a bounded probe has shown
that RLIMIT_NPROC binds here.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from trl_env_python.sandbox import BASE_ENV, Limits, MiB, Sandbox

HOSTILE = Limits(
    wall_seconds=3.0, cpu_seconds=1, memory_bytes=256 * MiB, processes=8, output_bytes=8192
)


def run(code: str, limits: Limits = HOSTILE) -> tuple[str, str, float]:
    result = Sandbox(limits).run(textwrap.dedent(code))
    return result.status, result.text(), result.seconds


def test_infinite_loop_hits_the_cpu_limit(leftovers: Callable[..., list[int]]) -> None:
    status, text, seconds = run("while True: pass", Limits(wall_seconds=30, cpu_seconds=1))
    assert status == "cpu_limit"
    assert text == "[killed: CPU time limit of 1 s exceeded]"
    assert seconds < 30
    assert leftovers() == []


def test_sleeping_forever_hits_the_wall_clock() -> None:
    code = """
        import time
        print('started', flush=True)
        while True:
            time.sleep(1)
    """
    status, text, seconds = run(code)
    assert status == "timeout"
    assert text == "started\n[killed: still running after 3 s]"
    assert 3.0 <= seconds < 3.0 + 5


def test_memory_bomb_gets_memory_error() -> None:
    status, text, _ = run("hog = []\nwhile True:\n    hog.append(bytearray(10**7))")
    assert status == "error"
    assert "MemoryError" in text and text.endswith("[exit code 1] [memory limit: 256 MiB]")
    status, text, _ = run("x = bytearray(10**11)")  # one huge allocation
    assert status == "error" and "MemoryError" in text


NPROC_PROBE = """
    import os, time
    children = 0
    for _ in range(40):
        try:
            pid = os.fork()
        except OSError as exc:
            print('refused:', exc.strerror)
            break
        if pid == 0:
            time.sleep(2)
            os._exit(0)
        children += 1
    print('children:', children)
"""


def _nproc_binds() -> tuple[bool, str]:
    status, text, _ = run(NPROC_PROBE)
    children = int(text.split("children:")[1].split()[0]) if "children:" in text else -1
    return status == "ok" and 0 <= children < HOSTILE.processes, text


def test_process_limit_is_enforced_bounded_probe(leftovers: Callable[..., list[int]]) -> None:
    """40 sleeping children asked for, fewer than ``processes`` granted (as root: thanks to the
    dedicated uid; RLIMIT_NPROC does not bind uid 0)."""
    binds, text = _nproc_binds()
    if os.geteuid() == 0 and not binds:
        pytest.fail(f"RLIMIT_NPROC did not bind although the program runs as its own uid: {text}")
    assert binds, text
    assert "refused: Resource temporarily unavailable" in text
    assert leftovers() == []


def test_fork_bomb_is_contained(leftovers: Callable[..., list[int]]) -> None:
    binds, text = _nproc_binds()
    if not binds:
        pytest.skip(f"RLIMIT_NPROC does not bind here, so only the bounded probe ran: {text}")
    code = """
        import os
        while True:
            try:
                os.fork()
            except OSError:
                pass
    """
    status, text, seconds = run(code, Limits(wall_seconds=2, cpu_seconds=2, processes=8))
    assert status in ("timeout", "cpu_limit"), text
    assert text.startswith("[killed:")
    assert seconds < 2 + 5
    assert leftovers() == []


def test_environment_does_not_leak(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = secrets.token_hex(16)
    monkeypatch.setenv("TRL_ENV_TEST_SECRET", secret)
    code = f"""
        import os
        print(sorted(os.environ))
        print(dict(os.environ))
        for path in ('/proc/{os.getpid()}/environ', '/proc/1/environ', '/proc/self/environ'):
            try:
                print(open(path, 'rb').read())
            except OSError as exc:
                print(path, type(exc).__name__)
    """
    status, text, _ = run(code)
    assert status == "ok", text
    assert secret not in text and "TRL_ENV_TEST_SECRET" not in text
    names = text.splitlines()[0]
    assert names == str(sorted([*BASE_ENV, "HOME", "TMPDIR"]))


def test_writing_outside_the_working_directory_fails(tmp_path: Path, caps: dict[str, bool]) -> None:
    if os.geteuid() != 0 and not caps.get("readonly_root"):
        pytest.skip("neither a separate uid nor a read-only root: writes are not confined here")
    tmp_path.chmod(0o777)  # even a directory anyone may write to
    shared_tmp = Path("/tmp") / f"trl-env-escape-{secrets.token_hex(6)}"
    targets = [tmp_path / "escape.txt", shared_tmp, Path("/dev/shm") / shared_tmp.name]
    if os.geteuid() == 0:
        targets.append(Path(sys.prefix) / "escape.txt")  # the trainer's own installation
    code = f"""
        import os
        for path in {[str(t) for t in targets] + ["../escape.txt"]!r}:
            try:
                with open(path, 'w') as fh:
                    fh.write('x')
                print('WROTE', path)
            except OSError as exc:
                print('refused', path, exc.strerror)
        with open('inside.txt', 'w') as fh:
            fh.write('fine')
        print('inside ok')
    """
    status, text, _ = run(code)
    assert status == "ok", text
    assert "WROTE" not in text and text.endswith("inside ok")
    assert text.count("refused") == len(targets) + 1
    for target in targets:
        assert not target.exists(), target
    if caps.get("readonly_root"):  # world-writable /tmp and /dev/shm too
        assert f"refused {shared_tmp} Read-only file system" in text


def test_connecting_to_a_local_socket_fails(need: Callable[[str], None]) -> None:
    need("network")
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        code = f"""
            import socket
            for family, address in ((socket.AF_INET, ('127.0.0.1', {port})),
                                    (socket.AF_INET6, ('::1', {port}))):
                try:
                    s = socket.socket(family)
                    s.settimeout(2)
                    s.connect(address)
                    print('CONNECTED', address)
                except OSError as exc:
                    print('refused:', exc)
        """
        status, text, _ = run(code)
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()
    assert status == "ok", text
    assert "CONNECTED" not in text
    assert text.count("refused:") == 2


def test_gigabytes_of_output_are_cut_quickly(leftovers: Callable[..., list[int]]) -> None:
    code = """
        import sys
        chunk = 'x' * (1 << 20)
        for _ in range(4096):  # 4 GiB
            sys.stdout.write(chunk)
    """
    status, text, seconds = run(code, Limits(wall_seconds=60, output_bytes=8192))
    assert status == "output_limit"
    assert text == "x" * 8192 + "\n[killed: output passed 8192 bytes; the rest is lost]"
    assert seconds < 20
    status, text, _ = run("import os\nwhile True:\n    os.write(2, b'e' * 65536)")
    assert status == "output_limit" and len(text) < 8192 + 100
    assert leftovers() == []


def test_huge_files_and_many_open_files_are_refused() -> None:
    status, text, _ = run("open('big', 'wb').write(b'x' * (64 << 20))")
    assert status == "error" and "OSError: [Errno 27] File too large" in text
    status, text, _ = run("files = [open('f%d' % i, 'w') for i in range(1000)]")
    assert status == "error" and "Too many open files" in text


def test_filling_the_working_directory_stops_at_its_size(need: Callable[[str], None]) -> None:
    need("tmpfs_workdir")
    code = """
        i = 0
        try:
            while True:
                with open('f%d' % i, 'wb') as fh:
                    fh.write(b'x' * (4 << 20))
                i += 1
        except OSError as exc:
            print(i, exc.strerror)
    """
    status, text, _ = run(code, Limits(workdir_bytes=16 * MiB, file_bytes=8 * MiB))
    assert status == "ok" and text.endswith("No space left on device")
    assert int(text.split()[0]) <= 4


def test_the_program_cannot_kill_its_supervisors() -> None:
    code = """
        import os, signal
        for pid in (os.getppid(), 1, -1):
            try:
                os.kill(pid, signal.SIGKILL)
                print('signalled', pid)
            except OSError as exc:
                print(pid, type(exc).__name__)
        print('alive')
    """
    status, text, _ = run(code)
    if os.geteuid() != 0:
        pytest.skip("without root the program runs as the trainer's user (see README)")
    assert status == "ok" and text.endswith("alive"), text
    assert "signalled" not in text.replace("signalled -1", "")


def test_self_kill_is_reported_as_killed() -> None:
    status, text, _ = run("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
    assert (status, text) == ("killed", "[killed by signal SIGKILL]")
    status, text, _ = run("import ctypes\nctypes.string_at(0)")  # a segfault
    assert (status, text) == ("killed", "[killed by signal SIGSEGV] [memory limit: 256 MiB]")


def test_the_trainer_dying_mid_run_leaves_nothing_behind(
    leftovers: Callable[..., list[int]], tmp_path: Path
) -> None:
    script = f"""
        from trl_env_python.sandbox import Limits, Sandbox
        sandbox = Sandbox(Limits(wall_seconds=300, cpu_seconds=5), tmp_dir={str(tmp_path)!r})
        sandbox.run("import time; time.sleep(300)")
    """
    trainer = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)])
    try:
        deadline = time.monotonic() + 30
        while not leftovers(trainer.pid, seconds=0) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert leftovers(trainer.pid, seconds=0), "the sandbox never started"
        time.sleep(1.0)  # let the program reach its sleep
        trainer.send_signal(signal.SIGKILL)
        trainer.wait()
        assert leftovers(trainer.pid, seconds=5) == []
        # Only the trainer could remove its temporary directory: main.py stays behind.
        assert [p.name for p in tmp_path.glob("*/*")] == ["main.py"]
    finally:
        if trainer.poll() is None:
            trainer.kill()
            trainer.wait()


@pytest.mark.parametrize("shared", ["/dev/shm", "/var/tmp"])
def test_no_named_pipe_of_the_host_is_in_reach(shared: str, need: Callable[[str], None]) -> None:
    # A host process leaves a FIFO anyone may open in a world-writable directory; a program
    # that opens it (a read-only mount does not stop that) could pass data either way.
    need("private_tmp")
    if not os.path.isdir(shared):
        pytest.skip(f"{shared} does not exist here")
    fifo = Path(shared) / f"trl-env-fifo-{secrets.token_hex(6)}"
    os.mkfifo(fifo, 0o666)
    fifo.chmod(0o666)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a writer may open it once it is read
    try:
        code = f"""
            import os
            try:
                fd = os.open({str(fifo)!r}, os.O_WRONLY | os.O_NONBLOCK)
                os.write(fd, b'LEAKED')
                print('OPENED')
            except OSError as exc:
                print('refused:', exc.strerror)
            print(sorted(os.listdir({shared!r})))
        """
        status, text, _ = run(code)
        try:
            got = os.read(reader, 64)
        except BlockingIOError:
            got = b""
    finally:
        os.close(reader)
        fifo.unlink()
    assert status == "ok", text
    assert got == b"" and "OPENED" not in text, text
    assert "refused: No such file or directory" in text and fifo.name not in text

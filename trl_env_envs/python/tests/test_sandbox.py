"""Ordinary runs of the sandbox: output, exit status, limits as settings, isolation modes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from trl_env_python.sandbox import Limits, RunResult, Sandbox

FAST = Limits(wall_seconds=20, cpu_seconds=5)


def test_output_and_clean_exit() -> None:
    result = Sandbox(FAST).run("print('hello')\nprint(6 * 7)")
    assert (result.status, result.output, result.exit_code) == ("ok", "hello\n42\n", 0)
    assert result.text() == "hello\n42"
    assert result.cpu_seconds is not None and result.cpu_seconds < 5


def test_errors_are_readable() -> None:
    result = Sandbox(FAST).run("print('before')\nraise ValueError('bad value')")
    assert result.status == "error" and result.exit_code == 1
    text = result.text()
    assert text.startswith("before\nTraceback (most recent call last):")
    assert "ValueError: bad value" in text and text.endswith("[exit code 1]")
    assert Sandbox(FAST).run("import sys; sys.exit(3)").text() == "[exit code 3]"
    assert Sandbox(FAST).run("pass").text() == "(no output)"
    assert "SyntaxError" in Sandbox(FAST).run("def (").text()


def test_stdout_and_stderr_keep_their_order() -> None:
    code = "import sys\nprint('a')\nprint('b', file=sys.stderr)\nprint('c')"
    assert Sandbox(FAST).run(code).output == "a\nb\nc\n"


def test_stdin_is_at_end_of_file() -> None:
    result = Sandbox(FAST).run("input()")
    assert result.status == "error" and "EOFError" in result.output


def test_unicode_and_undecodable_output() -> None:
    code = "import sys\nprint('漢字 🙂')\nsys.stdout.flush()\nsys.stdout.buffer.write(b'\\xff\\n')"
    result = Sandbox(FAST).run(code)
    assert result.output == "漢字 🙂\n\ufffd\n"
    lone_surrogate = Sandbox(FAST).run("print('\ud800')")  # not UTF-8: encoded as "?"
    assert (lone_surrogate.status, lone_surrogate.output) == ("ok", "?\n")


def test_code_too_large_is_rejected_without_running() -> None:
    result = Sandbox(Limits(code_bytes=100)).run("#" * 101)
    assert result.status == "rejected"
    assert result.text() == "[not run: the code is 101 bytes; the limit is 100]"


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match=r"Limits\.cpu_seconds must be a positive number"):
        Limits(cpu_seconds=0)


def test_required_isolation_that_is_missing_is_a_setup_error() -> None:
    result = Sandbox(FAST, require=frozenset({"teleportation"})).run("print('never')")
    assert result.status == "setup_error"
    assert result.text() == "[sandbox error: isolation missing: teleportation]"
    assert "never" not in result.output


def test_unusable_interpreter_is_a_setup_error() -> None:
    result = Sandbox(FAST, python="/nonexistent/python").run("print(1)")
    assert result.status == "setup_error" and "FileNotFoundError" in result.error
    if os.geteuid() == 0 and not os.stat("/root").st_mode & 0o001:
        hidden = Sandbox(FAST, python=sys.executable, filesystem=False).run("print(1)")
        if sys.executable.startswith("/root/") or os.path.realpath(sys.executable).startswith(
            "/root/"
        ):
            assert hidden.status == "setup_error"
            assert "the sandbox uid cannot reach the interpreter" in hidden.error


def test_working_directory_is_fresh_writable_and_removed(tmp_path: Path) -> None:
    code = (
        "import os\n"
        "print(os.getcwd())\n"
        "print(sorted(os.listdir('.')))\n"
        "open('notes.txt', 'w').write('kept only for this run')\n"
        "os.mkdir('sub')\n"
        "print(os.environ['HOME'] == os.getcwd() == os.environ['TMPDIR'])\n"
    )
    sandbox = Sandbox(FAST, tmp_dir=str(tmp_path))
    first = sandbox.run(code)
    workdir, listing, same = first.output.splitlines()
    assert listing == "['main.py']" and same == "True"
    assert not Path(workdir).exists()
    assert list(tmp_path.iterdir()) == []
    second = sandbox.run(code)
    assert second.output.splitlines()[1] == "['main.py']"  # nothing from the first run


def test_concurrent_runs_from_threads_are_independent() -> None:
    sandbox = Sandbox(FAST)
    results: dict[int, RunResult] = {}

    def work(i: int) -> None:
        results[i] = sandbox.run(f"import os, time\ntime.sleep(0.3)\nprint({i}, os.getuid())")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    outputs = [results[i].output.split() for i in range(4)]
    assert [int(o[0]) for o in outputs] == [0, 1, 2, 3]
    if os.geteuid() == 0:
        assert len({o[1] for o in outputs}) == 4  # one uid per concurrent run


# Without the mount namespace the sandbox uid must reach the interpreter by itself: the
# trainer's may live under /root (pyenv), so use a system one.
def _system_python() -> str | None:
    for path in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.path.exists(path):
            check = [path, "-c", "import sys; sys.exit(sys.version_info < (3, 11))"]
            if subprocess.run(check, check=False).returncode == 0:
                return path
    return None


SYSTEM_PYTHON = _system_python()
# Weaker modes still hold the line with what is left: the uid, the subreaper, the limits.
MODES = {
    "full": Sandbox(FAST),
    "no namespaces": Sandbox(
        FAST, python=SYSTEM_PYTHON or "", cut_network=False, pid=False, filesystem=False
    ),
    "no pid namespace": Sandbox(FAST, pid=False),
}


def _mode(name: str) -> Sandbox:
    if not MODES[name].python:
        pytest.skip("no system Python readable by every user")
    return MODES[name]


@pytest.mark.parametrize("mode", MODES, ids=list(MODES))
def test_modes_clean_up_escaped_daemons(mode: str, leftovers: Callable[..., list[int]]) -> None:
    code = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(60)\n"
        "    os._exit(0)\n"
        "print('main done')\n"
    )
    result = _mode(mode).run(code)
    assert result.status == "ok" and result.output == "main done\n"
    assert result.seconds < 10
    assert leftovers() == []


@pytest.mark.parametrize("mode", MODES, ids=list(MODES))
def test_modes_protect_the_trainer(mode: str, tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("without root the program runs as the trainer's user (see README)")
    target = tmp_path / "escape.txt"
    code = (
        f"for path in ({str(target)!r}, '/proc/{os.getpid()}/environ'):\n"
        "    try:\n"
        "        open(path, 'a').write('x')\n"
        "        print('WROTE', path)\n"
        "    except OSError as exc:\n"
        "        print(type(exc).__name__)\n"
    )
    result = _mode(mode).run(code)
    assert "WROTE" not in result.output and not target.exists()
    assert result.output.count("Error") == 2


NON_ROOT_SCRIPT = """
import json, os, socket, sys
sys.path[:0] = sys.argv[1:]
from trl_env_python.sandbox import Limits, Sandbox

listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(4)
port = listener.getsockname()[1]
sandbox = Sandbox(Limits(wall_seconds=20, processes=16), python=sys.executable)
code = f\"\"\"
import os, socket
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=2)
    print("CONNECTED")
except OSError as exc:
    print("refused", exc.errno)
for path in ("/tmp/trl-env-nonroot-escape", "/proc/{os.getpid()}/environ"):
    try:
        open(path, "a").write("x")
        print("WROTE", path)
    except OSError as exc:
        print("refused", path)
n = 0
for _ in range(40):
    try:
        if os.fork() == 0:
            import time; time.sleep(1); os._exit(0)
        n += 1
    except OSError:
        break
print("children", n)
\"\"\"
result = sandbox.run(code)
print(json.dumps({"status": result.status, "output": result.output, "iso": result.isolation}))
"""


def test_a_non_root_trainer_gets_namespaces_and_limits(leftovers: Callable[..., list[int]]) -> None:
    """Runs a trainer as uid ``nobody`` with the system Python (the venv's may be unreadable)."""
    if os.geteuid() != 0 or SYSTEM_PYTHON is None:
        pytest.skip("needs root (to start a trainer as nobody) and a system Python")
    src = [str(Path(__file__).parents[1] / "src"), str(Path(__file__).parents[3] / "core/src")]
    proc = subprocess.run(
        [SYSTEM_PYTHON, "-I", "-c", NON_ROOT_SCRIPT, *src],
        user=65534,
        group=65534,
        extra_groups=[],
        cwd="/",
        env={},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout.splitlines()[-1])
    assert report["status"] == "ok", report
    assert report["iso"]["dedicated_user"] is False
    output = report["output"]
    assert "WROTE" not in output and "CONNECTED" not in output
    children = int(output.split("children")[1])
    assert children < 16  # RLIMIT_NPROC binds for a non-root uid
    if not report["iso"].get("network"):
        pytest.skip(f"no user namespaces for nobody here: {report['iso']}")
    assert report["iso"]["readonly_root"] and report["iso"]["pid_namespace"]
    assert "refused 101" in output  # ENETUNREACH: loopback is down
    assert not Path("/tmp/trl-env-nonroot-escape").exists()

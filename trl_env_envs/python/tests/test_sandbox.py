"""Ordinary runs of the sandbox: output, exit status, limits as settings, isolation modes."""

from __future__ import annotations

import os
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
SYSTEM_PYTHON = next(
    (p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if os.path.exists(p)), None
)
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

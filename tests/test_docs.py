"""Every ```bash and ```python block of README.md and docs/*.md runs, on CPU, with the tiny models.

The blocks of one file run in order, in one scratch folder (so a later block can read what an
earlier one wrote) holding a copy of the checkout's git-tracked files (so that paths written
relative to a checkout work, and nothing a user's own commands wrote into it, such as an
``eval.jsonl`` or a ``trl-env-my-game/``, changes what a block finds) and a link to ``.venv``,
with ``.venv/bin`` first on ``PATH``. Each block runs in a session of its own: when it ends,
however it ends (done, failed, past its time limit), every process it started ends with it, its
servers in the background included, and the test never waits on a pipe one of them holds.
Conventions for writers:

- ``<!-- no-run: REASON -->`` on the line before a block skips it; the reason is required (it is
  what a reader of this test's output sees). For blocks that cannot run here: a GPU, the network,
  a package index, a command that runs this suite.
- A command line that would change the checkout or its virtualenv (``make``, ``pip``, ``uv``, a
  new venv) is never run; the rest of its block is (``make test`` inside this test would run the
  suite again, and a ``make`` from the scratch folder would reinstall ``.venv`` pointing at it).
  A python block that installs something is not run at all, and fails until marked ``no-run``.
- ``<!-- run-by: tests/test_X.py -->`` before a block that runs a bench script says that test
  runs the same script end to end (a smoke test), so it is not run twice; this test checks that
  the named test runs that script and that the script declares every option the block uses.
- Long commands are shortened before they run (:data:`FAST`): ``--max-steps N`` becomes 1,
  ``--episodes N`` 2, ``--repeats N`` 1, a hub model or tokenizer id becomes ``tiny``, and
  ``train --demo`` runs one step. Write the command a user should type; this test keeps it short.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import pytest
from markdown_it import MarkdownIt
from packaging.requirements import Requirement

from trl_env.testing.timeouts import scaled

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LANGUAGES = {"bash": ["bash", "-euo", "pipefail", "-c"], "python": [sys.executable, "-c"]}
NO_RUN = re.compile(r"<!--\s*no-run\s*:\s*(?P<reason>\S.*?)\s*-->", re.DOTALL)
RUN_BY = re.compile(r"<!--\s*run-by\s*:\s*(?P<test>tests/\S+\.py)\s*-->")
BENCH_RUN = re.compile(r"\bpython[\d.]*\s+(?P<script>bench/\w+\.py)(?P<args>[^\n#]*)")
HUB_ID = r"[A-Za-z0-9][\w.-]*/[\w.-]+"  # owner/name, as on the Hugging Face hub

# (pattern, replacement) applied to bash blocks, in order: the same command, made quick.
FAST = [
    (re.compile(r"--max-steps[ =]\d+"), "--max-steps 1"),
    (re.compile(r"--episodes[ =]\d+"), "--episodes 2"),
    (re.compile(r"--repeats[ =]\d+"), "--repeats 1"),
    (re.compile(rf"(--model|--tokenizer)[ =]{HUB_ID}"), r"\1 tiny"),
    (re.compile(r"(trl-env train --demo)(?!\S)"), r"\1 --max-steps 1"),
]
# Per block, generous and scaled by the machine's load: a slow machine makes no correct block fail.
TIMEOUT = 900
# ... but never longer than this: a block that hangs (a server that never answers its health
# loop) fails its file's test within half an hour, whatever the load, instead of holding the suite
MAX_TIMEOUT = 1800
UNSAFE = re.compile(
    r"(?:^|[;&|(]\s*)(?:\S*/)?(?:make|pip3?|uv|virtualenv)\b|\bpython[\d.]* -m (?:pip|venv)\b",
    re.MULTILINE,
)
# tracked, but not copied into the scratch folder: a ``make`` there would rebuild .venv for it
KEEP_OUT = {"Makefile", ".ci"}
# ignored by git, but what the blocks run with: linked into the scratch folder
ENVIRONMENT = (".venv", ".venv-vllm")
# set in each block's environment, so that a process that left the block's session still ends
MARKER = "TRL_ENV_DOC_BLOCK"
# how long ending a block's processes waits for them, per signal
GRACE = 5.0


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    language: str
    code: str
    skip: str | None  # the no-run reason, if any
    run_by: str | None = None  # the test that runs this block's bench script instead

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """The fenced ```bash and ```python blocks of ``path``, with their no-run reasons."""
    tokens = MarkdownIt().parse(path.read_text(encoding="utf-8"))
    found = []
    for i, token in enumerate(tokens):
        language = token.info.strip().split(" ")[0] if token.type == "fence" else ""
        if language not in LANGUAGES:
            continue
        before = tokens[i - 1] if i else None
        comment = before.content if before and before.type == "html_block" else ""
        marker, run_by = NO_RUN.search(comment), RUN_BY.search(comment)
        line = (token.map or [0])[0] + 1
        skip = marker["reason"] if marker else run_by and f"run by {run_by['test']}"
        found.append(Block(path, line, language, token.content, skip, run_by and run_by["test"]))
    return found


def shorten(code: str) -> str:
    for pattern, replacement in FAST:
        code = pattern.sub(replacement, code)
    return code


def without_installs(code: str) -> str:
    """``code`` with each command line that matches :data:`UNSAFE` replaced by a no-op."""
    lines = re.sub(r"\\\n", " ", code).splitlines()  # a continued command is one line
    return "".join(f": not run here: {line}\n" if UNSAFE.search(line) else f"{line}\n"
                   for line in lines)  # fmt: skip


def tracked(repo: Path) -> list[str]:
    """The paths git tracks in ``repo`` (its index: added files count, ignored ones never)."""
    listed = subprocess.run(
        ["git", "-C", str(repo), "ls-files", "-z", "--cached"],
        capture_output=True, check=True, timeout=scaled(60),
    )  # fmt: skip
    return [name for name in listed.stdout.decode().split("\0") if name]


def scratch(tmp_path: Path, repo: Path = REPO) -> Path:
    """A folder that looks like a fresh checkout of ``repo`` (its tracked files, copied) and
    runs with its virtualenv: what a block writes stays there, what a user wrote is not there."""
    work = tmp_path / "work"
    work.mkdir(parents=True)
    for name in tracked(repo):
        source, target = repo / name, work / name
        if name.split("/")[0] in KEEP_OUT or not os.path.lexists(source):  # deleted, uncommitted
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target, follow_symlinks=False)
    for name in ENVIRONMENT:
        if (repo / name).exists():
            (work / name).symlink_to(repo / name)
    return work


def block_processes(session: int, marker: str) -> list[int]:
    """The live processes of a block: those in its session, and those with its marker in their
    environment (one that started a session of its own). Read from /proc: none elsewhere."""
    mark = f"{MARKER}={marker}".encode()
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            # /proc/N/stat: "pid (comm) state ppid pgrp session ..."; comm may hold spaces
            state, _, _, sid = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:4]
            if state != "Z" and (int(sid) == session or mark in (entry / "environ").read_bytes()):
                found.append(int(entry.name))
        except (OSError, ValueError):  # gone meanwhile, or not ours to read
            continue
    return found


def end_block(process: subprocess.Popen[bytes], marker: str) -> None:
    """End every process a block started, its own shell included: TERM, then KILL; bounded."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)  # the block's shell leads its session and its group
        except ProcessLookupError:
            pass
        for pid in block_processes(process.pid, marker):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        end = time.monotonic() + GRACE
        while (left := block_processes(process.pid, marker)) and time.monotonic() < end:
            time.sleep(0.05)
        if not left:
            break
    process.wait(timeout=GRACE)


def run_block(
    block: Block, cwd: Path, timeout: float | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``block`` in ``cwd`` in a session of its own, then end whatever it left running.

    Its output goes to files, not pipes: a server left in the background cannot keep the test
    waiting for the end of its output. Past ``timeout`` (default :data:`TIMEOUT`, scaled by the
    machine's load, at most :data:`MAX_TIMEOUT`) the block is ended and reported as exit 124."""
    code = without_installs(shorten(block.code)) if block.language == "bash" else block.code
    marker = uuid.uuid4().hex
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env[MARKER] = marker
    env.pop("PYTHONPATH", None)
    limit = min(scaled(TIMEOUT), MAX_TIMEOUT) if timeout is None else timeout
    args = [*LANGUAGES[block.language], code]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        process = subprocess.Popen(
            args, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
            start_new_session=True,
        )  # fmt: skip
        late = ""
        try:
            returncode = process.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            returncode, late = 124, f"\n(ended at its time limit, {limit:.0f} s)"
        finally:
            end_block(process, marker)
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace")
        stderr = err.read().decode(errors="replace") + late
    return subprocess.CompletedProcess(args, returncode, stdout, stderr)


# -- the harness itself ------------------------------------------------------------------------
def test_blocks_are_found_with_their_lines_and_no_run_reasons(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(
        "# T\n\n```bash\necho one\n```\n\n<!-- no-run: needs a GPU -->\n```python\nimport x\n```\n"
        "\n```\nplain text\n```\n\n<!-- no-run: -->\n```bash\necho two\n```\n"
    )
    found = blocks(doc)
    assert [(b.line, b.language, b.code, b.skip) for b in found] == [
        (3, "bash", "echo one\n", None),
        (8, "python", "import x\n", "needs a GPU"),
        (17, "bash", "echo two\n", None),  # a marker without a reason does not skip
    ]


def test_a_block_run_by_a_test_is_skipped_here(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(
        "<!-- run-by: tests/test_startup_bench.py -->\n```bash\npython bench/x.py\n```\n"
    )
    (found,) = blocks(doc)
    assert (found.skip, found.run_by) == (
        "run by tests/test_startup_bench.py",
        "tests/test_startup_bench.py",
    )


def test_blocks_run_by_a_test_name_one_that_runs_their_script():
    """The smoke test a block names runs that block's bench script, which takes its options."""
    named = [b for path in DOCS for b in blocks(path) if b.run_by]
    assert named  # docs/benchmarks.md's smoke-tested blocks
    for block in named:
        runs = list(BENCH_RUN.finditer(block.code))
        assert runs, f"{block.where}: run-by is for a block that runs a bench/*.py script"
        test = (REPO / block.run_by).read_text(encoding="utf-8")
        for run in runs:
            script = REPO / run["script"]
            assert f'"{script.name}"' in test, (
                f"{block.where}: {block.run_by} runs no {script.name}"
            )
            declared = set(re.findall(r'add_argument\(\s*"(--[\w-]+)"', script.read_text("utf-8")))
            used = set(re.findall(r"(?<!\S)--[a-z][\w-]*", run["args"]))
            assert used <= declared, f"{block.where}: {sorted(used - declared)} not in {script}"


def test_long_commands_are_shortened():
    assert shorten(
        "trl-env train --env sokoban --model Qwen/Qwen3-0.6B --max-steps 200\n"
        "trl-env eval --episodes 32 --tokenizer=meta-llama/Llama-3.2-1B\n"
        "trl-env train --demo\nmake demo\n"
    ) == (
        "trl-env train --env sokoban --model tiny --max-steps 1\n"
        "trl-env eval --episodes 2 --tokenizer tiny\n"
        "trl-env train --demo --max-steps 1\nmake demo\n"
    )


def test_a_failing_block_is_reported_with_its_place(tmp_path):
    block = Block(REPO / "README.md", 7, "bash", "echo partial; false\n", None)
    result = run_block(block, tmp_path)
    assert result.returncode != 0 and result.stdout == "partial\n"
    assert report(block, result).startswith("README.md:7 (bash) exited 1")


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, ended but not yet reaped by its parent, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc")
def test_a_block_s_processes_end_with_it_whatever_it_did(tmp_path):
    """A failed block's server in the background ends with it, one in a session of its own too."""
    block = Block(
        REPO / "README.md", 1, "bash",
        "sleep 600 & echo $!\nsetsid sleep 600 & echo $!\nsleep 0.5\nfalse\nkill $!\n", None,
    )  # fmt: skip
    result = run_block(block, tmp_path)
    pids = [int(line) for line in result.stdout.split()]
    assert result.returncode == 1 and len(pids) == 2
    assert not any(alive(pid) for pid in pids)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc")
def test_a_block_past_its_limit_ends_with_its_servers_and_does_not_stall(tmp_path):
    """The case that stalled a suite: a block that never ends, a server holding its output."""
    block = Block(REPO / "README.md", 1, "bash", "sleep 600 & echo $!\nwait\n", None)
    started = time.monotonic()
    result = run_block(block, tmp_path, timeout=2.0)
    assert time.monotonic() - started < 2.0 + 2 * GRACE
    assert result.returncode == 124 and "time limit" in report(block, result)
    assert not alive(int(result.stdout))


def git_checkout(folder: Path, files: dict[str, str]) -> Path:
    """A git repository in ``folder`` whose index holds ``files`` (path -> text)."""
    folder.mkdir()
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    subprocess.run(["git", "init", "-q", str(folder)], check=True, timeout=scaled(60))
    subprocess.run(["git", "-C", str(folder), "add", *files], check=True, timeout=scaled(60))
    return folder


def test_the_scratch_folder_holds_the_tracked_files_only(tmp_path):
    repo = git_checkout(
        tmp_path / "repo",
        {"README.md": "# r\n", "docs/a.md": "a\n", ".gitignore": "*.jsonl\n", "Makefile": "x:\n"},
    )
    (repo / "eval.jsonl").write_text('{"seed": "0"}\n')  # what a user's eval --out wrote
    (repo / "trl-env-my-game").mkdir()  # what a user's trl-env new wrote
    (repo / "trl-env-my-game" / "pyproject.toml").write_text("")
    work = scratch(tmp_path / "t", repo=repo)
    assert sorted(str(p.relative_to(work)) for p in work.rglob("*")) == [
        ".gitignore", "README.md", "docs", "docs/a.md"
    ]  # fmt: skip
    (work / "docs" / "a.md").write_text("changed by a block\n")
    assert (repo / "docs" / "a.md").read_text() == "a\n"  # a copy: the checkout is untouched


# The files the docs' own commands write into the checkout a user runs them in.
WRITES = re.compile(r"--out[ =](?P<out>[\w.-]+)|trl-env new env (?P<new>[\w-]+)")


def test_the_doc_tests_pass_in_a_clone_where_the_readme_was_followed(tmp_path):
    """A newcomer clones, runs the README's commands, then ``make test``: every file those
    commands wrote (eval.jsonl, served.jsonl, trl-env-my-game/...) is left out of the sandbox,
    and the README line that wrote eval.jsonl runs there again (it refused before)."""
    clone = tmp_path / "clone"
    subprocess.run(
        ["git", "clone", "-q", "--no-hardlinks", str(REPO), str(clone)],
        check=True, timeout=scaled(120),
    )  # fmt: skip
    written = set()
    for path in DOCS:
        for block in blocks(path):
            for found in WRITES.finditer(block.code):
                written.add(found["out"] or f"trl-env-{found['new']}")
    assert {"eval.jsonl", "served.jsonl", "trl-env-my-game"} <= written
    for name in written:  # cheaper than running them: what they leave behind
        if name.endswith(".jsonl"):
            (clone / name).write_text('{"seed": "0", "reward": 1.0}\n')
        else:
            (clone / name / "src").mkdir(parents=True)
    work = scratch(tmp_path / "t", repo=clone)
    assert not [name for name in written if os.path.lexists(work / name)]
    (readme_eval,) = [
        line for block in blocks(REPO / "README.md") for line in block.code.splitlines()
        if "--out eval.jsonl" in line
    ]  # fmt: skip
    block = Block(REPO / "README.md", 0, "bash", readme_eval + "\n", None)
    result = run_block(block, work)
    assert result.returncode == 0, report(block, result)
    assert (work / "eval.jsonl").read_text() != (clone / "eval.jsonl").read_text()


def test_blocks_that_would_change_the_checkout_are_recognized():
    unsafe = ["make demo", "make test   # all", "pip install trl-env", ".venv/bin/pip x",
              "x && python3 -m pip install y", "uv pip install z", "true; make dist",
              "python -m venv .venv && . .venv/bin/activate"]  # fmt: skip
    safe = ["trl-env list", "echo make", "python bench/startup.py", "trl-env train --demo"]
    assert all(UNSAFE.search(code) for code in unsafe)
    assert not any(UNSAFE.search(code) for code in safe)
    mixed = "make demo\ntrl-env list\npip install \\\n  trl-env\necho done\n"
    assert without_installs(mixed) == (
        ": not run here: make demo\ntrl-env list\n: not run here: pip install    trl-env\n"
        "echo done\n"
    )


def report(block: Block, result: subprocess.CompletedProcess[str]) -> str:
    tail = (result.stderr or result.stdout).strip()[-1500:]
    return f"{block.where} ({block.language}) exited {result.returncode}:\n{block.code}{tail}"


# -- the README's install path ---------------------------------------------------------------
PIP_INSTALL = re.compile(r"^\s*pip install (?P<args>.+?)(?:\s+#.*)?$", re.MULTILINE)


# How the README's examples name envs and processors, on the command line and in Python.
def _naming(kind: str) -> re.Pattern[str]:
    name = r"[\w.-]+"
    return re.compile(
        rf"--{kind}[ =](?P<flag>{name})|load_{kind}\(\"(?P<call>{name})\"|{kind}=\"(?P<kw>{name})\""
    )


USES = {"trl_env.envs": _naming("env"), "trl_env.processors": _naming("processor")}


def readme_installs() -> list[str]:
    """The arguments of the README's ``pip install`` lines (torch's included)."""
    code = "".join(b.code for b in blocks(REPO / "README.md") if b.language == "bash")
    return [arg for m in PIP_INSTALL.finditer(code) for arg in m["args"].split()]


def registered_by(folder: Path) -> dict[str, set[str]]:
    """The env and processor names a distribution folder registers (its entry points)."""
    meta = tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))
    points = meta["project"].get("entry-points", {})
    return {group: set(points.get(group, {})) for group in USES}


def test_readme_installs_from_the_checkout_what_its_examples_use():
    """A newcomer installs what the Install section says, then runs the examples in order:
    each distribution comes from this checkout (nothing is published), and every env and
    processor an example names is registered by one that line installs."""
    args = readme_installs()
    local = [a.strip("\"'") for a in args if a.strip("\"'").startswith("./")]
    from_index = [a for a in args if not a.startswith(("-", "./", '"./', "http", "torch"))]
    assert not from_index, f"the README installs {from_index} from the package index"
    registered: dict[str, set[str]] = {group: set() for group in USES}
    for arg in local:
        folder = REPO / re.sub(r"\[.*\]$", "", arg)
        assert (folder / "pyproject.toml").is_file(), f"{arg} is not a distribution folder"
        for group, names in registered_by(folder).items():
            registered[group] |= names
    examples = "".join(b.code for b in blocks(REPO / "README.md"))
    for group, pattern in USES.items():
        used = {n for m in pattern.finditer(examples) for n in m.groupdict().values() if n}
        used = {n.split(":")[0] for n in used if n.upper() != n}  # NAME:WEIGHT; not placeholders
        missing = used - registered[group]
        assert not missing, f"README examples use {group} {sorted(missing)}, not installed"


def test_the_missing_training_stack_hint_installs_as_the_readme_does():
    """`trl-env train` without torch names the README's own CPU torch line, then the extra."""
    from trl_env.cli.main import TORCH_CPU, TRAIN_EXTRA

    code = "".join(b.code for b in blocks(REPO / "README.md") if b.language == "bash")
    assert TORCH_CPU in code
    assert TRAIN_EXTRA.split()[-1].strip("'") in [a.strip("\"'") for a in readme_installs()]


def test_readme_install_check_fails_without_what_an_example_needs():
    """The check above can fail: the examples use guess and wordle beyond sokoban alone."""
    examples = "".join(b.code for b in blocks(REPO / "README.md"))
    used = {n for m in USES["trl_env.envs"].finditer(examples) for n in m.groupdict().values() if n}
    only_sokoban = registered_by(REPO / "trl_env_envs" / "sokoban")["trl_env.envs"]
    assert {n.split(":")[0] for n in used} - only_sokoban


def commands(text: str) -> list[str]:
    """The trl-env command lines of ``text`` (continued lines joined, spaces collapsed, the
    ``.venv/bin/`` before ``trl-env`` dropped)."""
    lines = re.sub(r"\\\n", " ", text).splitlines()
    found = [" ".join(line.split()) for line in lines]
    return [re.sub(r"^\S*/trl-env ", "trl-env ", c) for c in found if re.match(r"\S*trl-env ", c)]


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_the_readme_s_demo_real_commands_are_what_make_runs():
    """The settings behind the README's real-model figures are in the README, as make runs them
    (before: only in the Makefile)."""
    (block,) = [b for b in blocks(REPO / "README.md") if "runs/demo-real/base.jsonl" in b.code]
    ran = subprocess.run(
        ["make", "-n", "demo-real"], cwd=REPO, capture_output=True, text=True, timeout=scaled(60)
    )
    assert ran.returncode == 0, ran.stderr
    made = [c for c in commands(ran.stdout) if re.match(r"trl-env (eval|sft|train|compare) ", c)]
    assert len(made) == 7 and commands(block.code) == made


# -- each distribution's README: it installs from the checkout --------------------------------
FOLDERS = ("core", "plugins/*", "trl_env_envs/*", "trl_env_processors/*")
DISTRIBUTIONS = [p.parent for f in FOLDERS for p in sorted(REPO.glob(f"{f}/pyproject.toml"))]
# what needs the core's train extra (the training stack)
TRAINING = re.compile(r"\btrl-env (?:train|eval|sft|check)\b")


def install_lines(readme: Path) -> list[list[str]]:
    """The arguments of each ``pip install`` line in the bash blocks of ``readme``."""
    code = "".join(b.code for b in blocks(readme) if b.language == "bash")
    lines = re.sub(r"\\\n", " ", code).splitlines()  # a continued command is one line
    return [
        shlex.split(line, comments=True)[2:] for line in lines if line.startswith("pip install ")
    ]


def local_folder(arg: str) -> Path:
    return REPO / re.sub(r"\[.*\]$", "", arg)  # "./core[train]": the folder ./core


@pytest.fixture(scope="module")
def installable(tmp_path_factory) -> dict[Path, dict]:
    """What pip makes of every folder the distributions' READMEs install, offline and without
    their dependencies (a dry run: nothing is installed), run from the checkout's root as the
    READMEs say: each folder's metadata (name, version, requirements)."""
    args = sorted({a for d in DISTRIBUTIONS for line in install_lines(d / "README.md")
                   for a in line if a.startswith("./")})  # fmt: skip
    report = tmp_path_factory.mktemp("pip") / "report.json"
    pip = [sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--no-index"]
    ran = subprocess.run(
        [*pip, "--no-build-isolation", "--quiet", "--report", str(report), *args],
        cwd=REPO, capture_output=True, text=True, timeout=scaled(600),
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    items = json.loads(report.read_text())["install"]
    return {Path(urlparse(i["download_info"]["url"]).path): i["metadata"] for i in items}


@pytest.mark.parametrize("folder", DISTRIBUTIONS, ids=lambda p: str(p.relative_to(REPO)))
def test_each_distribution_readme_installs_from_the_checkout(folder, installable):
    """Before: `pip install trl-env-guess`, which fails, as nothing is published. Each README
    installs its own folder and what it needs from the checkout (a dry run proves pip takes
    each), and what its examples name: the envs and processors, the training stack."""
    readme = folder / "README.md"
    lines = install_lines(readme)
    assert lines, f"{readme.relative_to(REPO)} has no pip install line"
    ours = {tomllib.loads((d / "pyproject.toml").read_text())["project"]["name"]
            for d in DISTRIBUTIONS}  # fmt: skip
    args = [a for line in lines for a in line if not a.startswith("-")]
    by_name = [a for a in args if not a.startswith("./")]
    assert not set(by_name) & ours, f"{by_name} are not published: install them from ./FOLDER"
    folders = [local_folder(a) for a in args if a.startswith("./")]
    assert folder in folders, f"{readme.relative_to(REPO)} does not install its own folder"
    metadata = [installable[f] for f in folders]
    versions = {m["name"]: m["version"] for m in metadata}
    for meta in metadata:  # nothing of ours comes from the index: each is installed beside
        for text in meta.get("requires_dist") or []:
            need = Requirement(text)
            if need.name in ours and need.marker is None:
                assert need.name in versions, f"{meta['name']} needs {need.name}: not installed"
                assert need.specifier.contains(versions[need.name]), (text, versions)
    registered: dict[str, set[str]] = {group: set() for group in USES}
    for f in folders:
        for group, names in registered_by(f).items():
            registered[group] |= names
    examples = "".join(b.code for b in blocks(readme))
    for group, pattern in USES.items():
        used = {n for m in pattern.finditer(examples) for n in m.groupdict().values() if n}
        missing = {n for n in used if n.upper() != n} - registered[group]
        assert not missing, f"{readme.relative_to(REPO)} uses {group} {missing}, not installed"
    if TRAINING.search(examples):
        assert "./core[train]" in args, "its commands need the training stack: ./core[train]"


# -- the docs ----------------------------------------------------------------------------------
@pytest.mark.timeout(0)  # each block has its own limit, scaled by load (see run_block)
@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_code_block_runs(path, tmp_path):
    runnable = [b for b in blocks(path) if b.skip is None]
    if not runnable:
        pytest.skip(f"{path.name} has no block to run")
    cwd = scratch(tmp_path)
    failures = []
    for block in runnable:
        if block.language == "python" and UNSAFE.search(block.code):
            failures.append(
                f"{block.where} ({block.language}) would change the checkout or "
                f"its venv; mark it <!-- no-run: REASON -->:\n{block.code}"
            )
            continue
        result = run_block(block, cwd)
        if result.returncode != 0:
            failures.append(report(block, result))
    assert not failures, "\n\n".join(failures)

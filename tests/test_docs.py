"""Every ```bash and ```python block of README.md and docs/*.md runs, on CPU, with the tiny models.

The blocks of one file run in order, in one scratch folder (so a later block can read what an
earlier one wrote), with the repository's top-level entries linked into it (``bench/``, ``core/``,
``.venv``...) so that paths written relative to a checkout work, and ``.venv/bin`` first on
``PATH``. Conventions for writers:

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

import os
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

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
TIMEOUT = 1200
UNSAFE = re.compile(
    r"(?:^|[;&|(]\s*)(?:\S*/)?(?:make|pip3?|uv|virtualenv)\b|\bpython[\d.]* -m (?:pip|venv)\b",
    re.MULTILINE,
)
# not linked into the scratch folder: runs/ holds the checkout's own runs, which a block's
# train would find not empty (and write into)
KEEP_OUT = {".git", "Makefile", ".ci", "runs"}


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


def scratch(tmp_path: Path) -> Path:
    """A folder that looks like the checkout (its top-level entries linked) but writes apart."""
    work = tmp_path / "work"
    work.mkdir()
    for entry in REPO.iterdir():
        if entry.name not in KEEP_OUT:
            (work / entry.name).symlink_to(entry)
    return work


def run_block(block: Block, cwd: Path) -> subprocess.CompletedProcess[str]:
    code = without_installs(shorten(block.code)) if block.language == "bash" else block.code
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("PYTHONPATH", None)
    return subprocess.run(
        [*LANGUAGES[block.language], code], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=scaled(TIMEOUT), check=False,
    )  # fmt: skip


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


def test_readme_install_check_fails_without_what_an_example_needs():
    """The check above can fail: the examples use guess and wordle beyond sokoban alone."""
    examples = "".join(b.code for b in blocks(REPO / "README.md"))
    used = {n for m in USES["trl_env.envs"].finditer(examples) for n in m.groupdict().values() if n}
    only_sokoban = registered_by(REPO / "trl_env_envs" / "sokoban")["trl_env.envs"]
    assert {n.split(":")[0] for n in used} - only_sokoban


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

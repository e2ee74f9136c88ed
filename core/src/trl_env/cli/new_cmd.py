"""``trl-env new``: a new environment or processor package from the template, ready to install."""

from __future__ import annotations

import importlib.metadata as md
import re
import shutil
from pathlib import Path

import click

from ..errors import TrlEnvError, UsageError

# kind -> (noun for messages, class-name suffix)
KINDS = {"env": ("environment", "Env"), "processor": ("processor", "Processor")}
TEMPLATE_SUFFIX = ".tmpl"
_NAME = re.compile(r"[a-z][a-z0-9]*(?:[-_.][a-z0-9]+)*")
_PLACEHOLDER = re.compile(r"\{\{\s*(\w+)\s*\}\}")


def template_dirs() -> list[Path]:
    """Where the template may live: shipped inside ``trl_env``, else the repo checkout."""
    package = Path(__file__).resolve().parents[1]  # .../trl_env
    return [package / "templates", package.parents[2] / "plugins" / "template"]


def find_template(kind: str) -> Path:
    candidates = template_dirs()
    for root in candidates:
        if (root / kind).is_dir():
            return root / kind
    looked = ", ".join(str(c) for c in candidates)
    raise TrlEnvError(
        f"The package template is not part of this trl-env install (looked in {looked}). "
        "Run trl-env from a source checkout (pip install -e core) or from a release that ships "
        "trl_env/templates."
    )


def placeholders(kind: str, name: str) -> dict[str, str]:
    """Values for ``{{name}}``, ``{{distribution}}``, ``{{package}}``, ``{{class_name}}``, ..."""
    name = re.sub(r"^trl[-_]env[-_]", "", name)  # `new env trl-env-maze` means `maze`
    if not _NAME.fullmatch(name):
        raise UsageError(
            f"Invalid {KINDS[kind][0]} name {name!r}: use lowercase letters and digits, "
            "starting with a letter, optionally joined by '-', '_' or '.' (e.g. maze, qwen3)."
        )
    words = re.split(r"[-_.]", name)
    return {
        "name": name,
        "distribution": "trl-env-" + "-".join(words),
        "package": "trl_env_" + "_".join(words),
        "class_name": "".join(w.capitalize() for w in words) + KINDS[kind][1],
        "core_requirement": _core_requirement(),
    }


def _core_requirement() -> str:
    try:
        major, minor = md.version("trl-env").split(".")[:2]
    except (md.PackageNotFoundError, ValueError):
        return "trl-env"
    return f"trl-env>={major}.{minor}"


def render_text(text: str, values: dict[str, str]) -> str:
    def value(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in values:
            raise TrlEnvError(f"The template uses an unknown placeholder {{{{{key}}}}}.")
        return values[key]

    return _PLACEHOLDER.sub(value, text)


def render(template: Path, dest: Path, values: dict[str, str]) -> list[Path]:
    """Write every template file under ``dest``, placeholders filled and ``.tmpl`` dropped."""
    written = []
    for src in sorted(template.rglob("*")):
        if src.is_dir() or "__pycache__" in src.parts:
            continue
        rel = Path(render_text(src.relative_to(template).as_posix(), values))
        if rel.suffix == TEMPLATE_SUFFIX:
            rel = rel.with_suffix("")
        out = dest / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(render_text(src.read_text(encoding="utf-8"), values), encoding="utf-8")
        written.append(out)
    return written


def create_package(
    kind: str, name: str, directory: Path | None = None
) -> tuple[Path, dict[str, str]]:
    """Render the ``kind`` template for ``name`` into ``directory`` (default ./trl-env-NAME)."""
    values = placeholders(kind, name)
    dest = directory if directory is not None else Path(values["distribution"])
    if dest.exists() and not (dest.is_dir() and not any(dest.iterdir())):
        raise UsageError(f"{dest} already exists; choose another --dir or remove it first.")
    template = find_template(kind)
    # Render next to the destination, then move it in: a failure leaves no half-made package.
    staging = dest.parent / f".{dest.name}.trl-env-new"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        render(template, staging, values)
        if dest.exists():
            dest.rmdir()
        staging.rename(dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return dest, values


@click.command("new")
@click.argument("kind", type=click.Choice(sorted(KINDS)))
@click.argument("name")
@click.option(
    "--dir",
    "directory",
    type=click.Path(path_type=Path),
    default=None,
    help="Folder to create (default: ./trl-env-NAME). Refuses to overwrite.",
)
def new_cmd(kind: str, name: str, directory: Path | None) -> None:
    """Create a new environment or processor package, ready to `pip install -e`.

    \b
    trl-env new env maze                 # ./trl-env-maze registers the environment "maze"
    trl-env new processor mistral --dir trl_env_processors/mistral
    """
    dest, values = create_package(kind, name, directory)
    noun = KINDS[kind][0]
    click.echo(f"Created {values['distribution']} ({noun} {values['name']!r}) in {dest}")
    click.echo("Next:")
    click.echo(f"  pip install -e '{dest}[test]'")  # the test extra brings pytest
    click.echo(f"  python -m pytest {dest / 'tests'}")
    click.echo("  trl-env list")

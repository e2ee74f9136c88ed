"""TextWorld games by seed: each made once by TextWorld's own generator, compiled, cached.

A seed names one game of a :class:`Shape` (rooms, objects, quest length). The first time a seed
is asked for, a child process (``python -m trl_env_textworld.make``) makes the game with
TextWorld's generator, as ``tw-make custom`` does, and compiles it with the Inform 7 that
TextWorld bundles; the game lands in ``<trl-env cache>/textworld/<version>/games/<id>/``
(``game.z8``, ``game.json``, ``game.ni``) and the seed's entry, ``seeds/<key>.json``, names it
and holds its walkthrough. Every later reset of the seed, in any process, reads the entry.

Safe against processes that make the same game at once: the seed's entry is made under a file
lock (a second process waits, then reads the first one's entry), a game folder appears whole
(compiled in a temporary folder, then renamed) and an entry is replaced whole, so a process
killed half-way leaves nothing a later one would read.

The child runs with ``PYTHONHASHSEED=0``: the generator is then the same in every process and
on every machine, whatever the parent's hash seed.

Splits: a game's class is its quest, named by its walkthrough. A fifth of all quests (by a hash
of the walkthrough) are held out: ``eval-*`` seeds play only those and ``train-*`` seeds never
do, so a quest learned in training never comes back in evaluation. A seed tries up to
:data:`SPLIT_TRIES` games for one of its class; other seeds play their first game.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

from trl_env.envkit import stable_int
from trl_env.errors import TrlEnvError
from trl_env.tiny import cache_root

# Bump when what a seed maps to changes: entries of the older scheme are not read.
FORMAT = 1
EVAL_SHARE = 0.2  # of all quests (walkthroughs), held out for eval seeds
SPLIT_TRIES = 64
# Seconds the child may take to find and compile a game (TextWorld's import alone takes ~5 s,
# a compile ~3 s, an eval seed ~5 tries of ~1 s; a loaded machine multiplies all of it).
MAKE_TIMEOUT = 600.0


class TextWorldError(TrlEnvError):
    """TextWorld could not make or compile a game (one sentence, with TextWorld's reason)."""


@dataclass(frozen=True)
class Shape:
    """What the generator is asked for: ``tw-make custom``'s ``--world-size``,
    ``--nb-objects`` and ``--quest-length``."""

    world_size: int
    nb_objects: int
    quest_length: int

    @property
    def label(self) -> str:
        return f"{self.world_size}x{self.nb_objects}x{self.quest_length}"


@dataclass(frozen=True)
class Game:
    """A compiled game: its story file (``game.json`` beside it) and its walkthrough."""

    path: Path
    walkthrough: tuple[str, ...]


def quest_split(walkthrough: list[str] | tuple[str, ...]) -> str:
    """The split of a game's class, its quest (see the module docstring)."""
    number = stable_int("textworld-quest:" + "\n".join(walkthrough))
    return "eval" if number < EVAL_SHARE * 2**64 else "train"


def game_number(shape: Shape, seed: str, attempt: int) -> int:
    """The generator's seed for a seed's ``attempt``-th try (numpy takes it below 2**32)."""
    return stable_int(f"textworld:{shape.label}:{seed}:{attempt}") % 2**32


def textworld_version() -> str:
    try:
        return metadata.version("textworld")
    except metadata.PackageNotFoundError:
        return "missing"


def games_root() -> Path:
    """Where the games live: under the trl-env cache (``TRL_ENV_CACHE``), per TextWorld
    version and :data:`FORMAT`."""
    return cache_root() / "textworld" / f"textworld-{textworld_version()}-f{FORMAT}"


def seed_key(shape: Shape, seed: str) -> str:
    return f"{stable_int(json.dumps([FORMAT, asdict(shape), seed])):016x}"


_memo: dict[tuple[Path, str], Game] = {}
_key_locks: dict[str, threading.Lock] = {}
_key_locks_lock = threading.Lock()


def game_for(shape: Shape, seed: str, split: str | None) -> Game:
    """The game of ``seed`` (one of ``split``'s class, when given), made on first use."""
    root = games_root()
    key = seed_key(shape, seed)
    with _key_lock(key):
        game = _memo.get((root, key)) or _read_entry(root, key)
        if game is None:
            try:
                with _file_lock(root / "locks" / f"{key}.lock"):
                    game = _read_entry(root, key)  # another process may have made it meanwhile
                    if game is None:
                        game = _make(shape, seed, split, root)
                        _write_entry(root, key, game)
            except OSError as exc:
                raise TextWorldError(
                    f"The TextWorld game cache {root} cannot be used ({exc.strerror or exc}); "
                    "set TRL_ENV_CACHE to a folder this process can write."
                ) from None
        _memo[(root, key)] = game
        return game


def _key_lock(key: str) -> threading.Lock:
    with _key_locks_lock:
        return _key_locks.setdefault(key, threading.Lock())


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock held while the block runs; the system drops it if the process dies."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _read_entry(root: Path, key: str) -> Game | None:
    """The seed's entry, when it and its game are there whole; None otherwise."""
    try:
        entry = json.loads((root / "seeds" / f"{key}.json").read_text(encoding="utf-8"))
        path = root / "games" / str(entry["game"]) / "game.z8"
        walkthrough = tuple(str(a) for a in entry["walkthrough"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not (path.is_file() and path.with_suffix(".json").is_file()):
        return None
    return Game(path, walkthrough)


def _write_entry(root: Path, key: str, game: Game) -> None:
    folder = root / "seeds"
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f"{key}.json.{os.getpid()}.{threading.get_ident()}.tmp"
    entry = {"game": game.path.parent.name, "walkthrough": list(game.walkthrough)}
    tmp.write_text(json.dumps(entry), encoding="utf-8")
    os.replace(tmp, folder / f"{key}.json")  # whole or not at all


def _make(shape: Shape, seed: str, split: str | None, root: Path) -> Game:
    """Run the maker child (``trl_env_textworld.make``) and read the game it made."""
    request = {"shape": asdict(shape), "seed": seed, "split": split, "root": str(root)}
    package_parent = str(Path(__file__).resolve().parents[1])
    path = os.pathsep.join(p for p in (package_parent, os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": path}
    what = f"TextWorld game of seed {seed!r} ({shape.label})"
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "trl_env_textworld.make"],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            env=env,
            timeout=MAKE_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise TextWorldError(f"Making the {what} took over {MAKE_TIMEOUT:.0f} s.") from None
    lines = proc.stdout.strip().splitlines()
    try:
        reply = json.loads(lines[-1]) if lines else {}
    except ValueError:
        reply = {}
    if proc.returncode != 0 or "game" not in reply:
        reason = reply.get("error") or _last_line(proc.stderr) or f"exit {proc.returncode}"
        raise TextWorldError(f"Could not make the {what}: {reason}")
    return Game(root / "games" / str(reply["game"]) / "game.z8", tuple(reply["walkthrough"]))


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""

"""The maker of one seed's game, run as a child by :func:`trl_env_textworld.games.game_for`.

Reads ``{"shape", "seed", "split", "root"}`` as JSON on stdin; tries the seed's games with
TextWorld's generator until one of ``split``'s class comes up; compiles it into
``root/games/<name>/`` unless it is there already; prints ``{"game": name, "walkthrough": [...]}``
(or ``{"error": sentence}`` and exits 2) as the last line of stdout.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from trl_env.atomic import building

from .games import SPLIT_TRIES, Shape, TextWorldError, game_number, quest_split

# A shape whose first tries all fail (a quest longer than the world allows) is refused early.
FAILED_TRIES = 8


def choose(shape: Shape, seed: str, split: str | None) -> tuple[int, Any]:
    """The generator's seed and the game of ``seed``: its first try of ``split``'s class."""
    from textworld import GameOptions
    from textworld.generator import make_game

    failures: list[str] = []
    made = 0
    for attempt in range(SPLIT_TRIES):
        number = game_number(shape, seed, attempt)
        options = GameOptions()
        options.seeds = number
        options.nb_rooms = shape.world_size
        options.nb_objects = shape.nb_objects
        options.quest_length = shape.quest_length
        try:
            game = make_game(options)
        except Exception as exc:  # TextWorld found no quest of that length in this world
            failures.append(f"{type(exc).__name__}: {exc}".strip().rstrip(":"))
            if not made and len(failures) >= FAILED_TRIES:
                break
            continue
        made += 1
        walkthrough = game.walkthrough
        if walkthrough and (split is None or quest_split(walkthrough) == split):
            return number, game
    if not made:
        raise TextWorldError(
            f"TextWorld made no game with {shape.world_size} rooms, {shape.nb_objects} objects "
            f"and a quest of {shape.quest_length} steps in {len(failures)} tries "
            f"(last: {failures[-1]}); try a larger world or a shorter quest."
        )
    raise TextWorldError(
        f"none of the {SPLIT_TRIES} games tried has a quest of the {split} class; this shape has "
        "too few distinct quests for a held-out class (try a longer quest or a larger world)."
    )


def compile_into(root: Path, shape: Shape, number: int, game: Any) -> str:
    """Compile ``game`` into ``root/games/<name>`` (whole, or not at all); its name."""
    from textworld import GameOptions
    from textworld.generator import compile_game

    name = f"{shape.label}-{number:08x}"
    games = root / "games"
    final = games / name
    if (final / "game.z8").is_file() and (final / "game.json").is_file():
        return name
    # A concurrent maker's copy is the same game: whichever lands first stays.
    with building(final, lambda f: (f / "game.z8").is_file()) as tmp:
        options = GameOptions()
        options.path = str(tmp / "game.z8")
        options.force_recompile = True
        try:
            compile_game(game, options)
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}"
            raise TextWorldError(f"Inform 7 could not compile it: {reason}") from None
    return name


def main() -> int:
    request = json.loads(sys.stdin.read())
    shape = Shape(**request["shape"])
    try:
        number, game = choose(shape, str(request["seed"]), request["split"])
        name = compile_into(Path(request["root"]), shape, number, game)
    except TextWorldError as exc:
        print(json.dumps({"error": str(exc)}))
        return 2
    print(json.dumps({"game": name, "walkthrough": list(game.walkthrough)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

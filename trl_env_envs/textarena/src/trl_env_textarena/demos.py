"""Winning moves for the games whose state holds the answer: ``TextArenaEnv.demonstrate``.

Each solver reads a freshly reset game (the bare TextArena env) and returns the replies that
win it. Games without one (most of them need search, or luck) are not demonstrated.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def mastermind(core: Any) -> list[str]:
    """The secret code, guessed at once."""
    code = core.state.game_state["secret_code"]
    return ["[" + " ".join(str(d) for d in code) + "]"]


def guess_the_number(core: Any) -> list[str]:
    return [f"[{core.game_number}]"]


def tower_of_hanoi(core: Any) -> list[str]:
    """The shortest solution: move the whole stack from A to C through B."""
    moves: list[str] = []

    def move(disks: int, source: str, target: str, spare: str) -> None:
        if disks:
            move(disks - 1, source, spare, target)
            moves.append(f"[{source} {target}]")
            move(disks - 1, spare, target, source)

    move(len(core.state.game_state["towers"]["A"]), "A", "C", "B")
    return moves


# Game id prefix -> solver.
SOLVERS: dict[str, Callable[[Any], list[str]]] = {
    "Mastermind-v0": mastermind,
    "GuessTheNumber-v0": guess_the_number,
    "TowerOfHanoi-v0": tower_of_hanoi,
}


def solver_for(game: str) -> Callable[[Any], list[str]] | None:
    return next((fn for prefix, fn in SOLVERS.items() if game.startswith(prefix)), None)

"""Move parsing and the BFS solver."""

from __future__ import annotations

import pytest

from trl_env_sokoban import Board, Level, parse_moves, solve
from trl_env_sokoban.solver import SearchLimit


@pytest.mark.parametrize(
    ("text", "moves"),
    [
        ("up", ["up"]),
        ("LEFT", ["left"]),
        ("Move left", ["left"]),
        ("  r\n", ["right"]),
        ("D", ["down"]),
        ("go north, then east", ["up", "right"]),
        ("left left up", ["left", "left", "up"]),
        ("l, l, u", ["left", "left", "up"]),
        ("lurd", ["left", "up", "right", "down"]),
        ("LLU", ["left", "left", "up"]),
        ("←↑→↓", ["left", "up", "right", "down"]),
        ("⬆️", ["up"]),
        ("I'd push the box: down", ["down"]),
        ("upward", []),
        ("", []),
        ("hello world", []),
        ("42", []),
    ],
)
def test_parse_moves(text: str, moves: list[str]) -> None:
    assert parse_moves(text) == moves


def test_parse_moves_handles_huge_text() -> None:
    assert parse_moves("left " * 20_000) == ["left"] * 20_000


def replay(level: Level, moves: list[str]) -> Board:
    board = Board.start(level)
    for move in moves:
        assert board.move(move) in ("walk", "push"), f"{move} failed"
    return board


def test_solver_finds_fewest_pushes_in_a_corridor() -> None:
    level = Level.parse("#######\n#@ $ .#\n#######")
    solution = solve(level)
    assert solution is not None and solution.pushes == 2
    assert solution.moves == ["right", "right", "right"]  # walk one, push two
    assert replay(level, solution.moves).solved()


def test_solver_walks_around_to_push_from_the_other_side() -> None:
    # The box must go left; the player has to walk around it through the lower row.
    level = Level.parse("#######\n#. $@ #\n#     #\n#######")
    solution = solve(level)
    assert solution is not None and solution.pushes == 2
    assert replay(level, solution.moves).solved()


def test_solver_reports_unsolvable() -> None:
    assert solve(Level.parse("######\n#$  .#\n#  @ #\n######")) is None  # box in a corner
    assert solve(Level.parse("#######\n#@$$..#\n#######")) is None  # two boxes in a row


def test_solver_gives_up_past_its_state_limit() -> None:
    level = Level.parse(
        "##########\n#@       #\n# $ $ $  #\n#        #\n#  ...   #\n#        #\n##########"
    )
    with pytest.raises(SearchLimit):
        solve(level, max_states=10)

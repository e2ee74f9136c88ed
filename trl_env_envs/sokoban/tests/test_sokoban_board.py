"""Notation, push rule and deadlock detection on hand-written boards."""

from __future__ import annotations

import pytest

from trl_env_sokoban.board import Board, Level, frozen_square

CORRIDOR = """\
######
#@$ .#
######"""

ROOM = """\
#######
#     #
# $   #
#  *  #
#+    #
#######"""


def cell(level: Level, row: int, col: int) -> int:
    return row * level.width + col


def test_render_gives_back_the_parsed_text() -> None:
    for text in (CORRIDOR, ROOM):
        assert Level.parse(text).render() == text


def test_parse_reads_every_symbol() -> None:
    level = Level.parse(ROOM)
    assert (level.width, level.height) == (7, 6)
    assert level.player == cell(level, 4, 1)  # "+": the player, on a goal
    assert level.boxes == {cell(level, 2, 2), cell(level, 3, 3)}
    assert level.goals == {cell(level, 3, 3), cell(level, 4, 1)}
    assert cell(level, 0, 0) in level.walls and cell(level, 1, 1) not in level.walls


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("#####\n#@$.#\n#@  #\n#####", "exactly one player"),
        ("#####\n# $.#\n#####", "exactly one player"),
        ("#####\n#@$$.#\n######", "as many goals"),
        ("#####\n#@$.X\n#####", "unknown"),
        ("#####\n#@$. \n#####", "walk off"),
    ],
)
def test_parse_refuses_broken_levels(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Level.parse(text)


def test_walk_push_wall_and_blocked() -> None:
    level = Level.parse(CORRIDOR)
    board = Board.start(level)
    assert board.move("left") == "wall" and board.player == level.player
    assert board.move("right") == "push"
    assert board.boxes == {cell(level, 1, 3)} and board.player == cell(level, 1, 2)
    assert board.move("right") == "push" and board.solved()
    assert board.move("right") == "blocked"  # the box is against the wall
    assert board.move("left") == "walk" and board.player == cell(level, 1, 2)
    assert board.render() == "######\n# @ *#\n######"


def test_two_boxes_in_a_row_cannot_be_pushed() -> None:
    level = Level.parse("#######\n#@$$ .#\n#    .#\n#######")
    board = Board.start(level)
    assert board.move("right") == "blocked" and board.player == level.player


def test_player_on_goal_and_box_on_goal_render() -> None:
    level = Level.parse("######\n#@$ .#\n######")
    board = Board.start(level)
    board.move("right")
    board.move("right")
    board.move("right")  # blocked: the box is on the goal against the wall
    assert board.render() == "######\n#  @*#\n######"
    level = Level.parse("#######\n#.@$  #\n#######")
    board = Board.start(level)
    board.move("left")
    assert board.render() == "#######\n#+ $  #\n#######"


def test_dead_cells_are_non_goal_corners_and_goalless_walls() -> None:
    level = Level.parse("#######\n#@    #\n#  $  #\n#    .#\n#######")
    dead = level.dead_cells()
    for r, c in ((1, 1), (1, 5), (3, 1)):  # corners without a goal
        assert cell(level, r, c) in dead
    for c in range(2, 5):  # the top wall has no goal: a box pushed there stays there
        assert cell(level, 1, c) in dead
    assert cell(level, 3, 5) not in dead  # the goal itself
    assert cell(level, 3, 3) not in dead  # the bottom wall has a goal to slide to
    assert cell(level, 2, 3) not in dead


def test_stuck_when_a_box_is_in_a_corner() -> None:
    level = Level.parse("######\n#    #\n# $@ #\n#  . #\n######")
    board = Board.start(level)
    dead = level.dead_cells()
    assert not board.stuck(dead)
    board.move("left")  # box to (2, 1): against the left wall, which has no goal
    assert board.boxes == {cell(level, 2, 1)} and board.stuck(dead)


def test_frozen_two_by_two_block() -> None:
    level = Level.parse("#######\n#     #\n# $$  #\n# $$@ #\n#  ...#\n#    .#\n#######")
    boxes = set(level.boxes)
    assert all(frozen_square(level, boxes, b) for b in boxes)
    assert Board.start(level).stuck(level.dead_cells())
    loose = boxes - {cell(level, 2, 2)}
    assert not any(frozen_square(level, loose, b) for b in loose)


def test_frozen_block_on_goals_is_not_stuck() -> None:
    level = Level.parse("######\n#@   #\n# ** #\n# ** #\n#    #\n######")
    assert not Board.start(level).stuck(level.dead_cells())

"""A small breadth-first Sokoban solver: fewest pushes, for small boards.

States are (boxes, the player's reachable area) with the area named by its smallest cell, so
walking is free and only pushes are searched. Boxes are never pushed onto dead cells or into
frozen 2x2 blocks. Used to check that generated levels are solvable and to grade difficulty.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from .board import DIRECTIONS, Level, frozen_square, offset

State = tuple[frozenset[int], int]
Parents = dict[State, tuple[State, int, str] | None]  # state -> (previous state, box, push)


@dataclass(frozen=True)
class Solution:
    """A shortest solution in pushes, as moves the env accepts."""

    pushes: int
    moves: list[str]


class SearchLimit(Exception):
    """The search met more than ``max_states`` states without deciding."""


def solve(level: Level, max_states: int = 50_000) -> Solution | None:
    """Fewest-push solution of ``level``, or ``None`` if it has none.

    Raises :class:`SearchLimit` past ``max_states`` states (boards too big for this solver).
    """
    dead = level.dead_cells()
    start_area = level.reachable(level.player, level.boxes)
    start: State = (level.boxes, min(start_area))
    parent: Parents = {start: None}
    queue = deque([(start, start_area)])
    while queue:
        (boxes, _), area = queue.popleft()
        if boxes == level.goals:
            return _moves(level, parent, (boxes, min(area)))
        for box in boxes:
            for d in DIRECTIONS:
                step = offset(d, level.width)
                target = box + step
                if box - step not in area or target in level.walls or target in boxes:
                    continue
                if target in dead:
                    continue
                new_boxes = (boxes - {box}) | {target}
                if target not in level.goals and frozen_square(level, new_boxes, target):
                    continue
                new_area = level.reachable(box, new_boxes)
                state: State = (new_boxes, min(new_area))
                if state in parent:
                    continue
                parent[state] = ((boxes, min(area)), box, d)
                if len(parent) > max_states:
                    raise SearchLimit(f"more than {max_states} states")
                queue.append((state, new_area))
    return None


def _moves(level: Level, parent: Parents, end: State) -> Solution:
    pushes: list[tuple[int, str]] = []
    state = end
    while (link := parent[state]) is not None:
        state, box, d = link
        pushes.append((box, d))
    pushes.reverse()
    moves: list[str] = []
    boxes, player = set(level.boxes), level.player
    for box, d in pushes:
        step = offset(d, level.width)
        moves += _walk(level, boxes, player, box - step)
        moves.append(d)
        boxes.remove(box)
        boxes.add(box + step)
        player = box
    return Solution(len(pushes), moves)


def _walk(level: Level, boxes: set[int], start: int, goal: int) -> list[str]:
    """Shortest walk (no pushes) from ``start`` to ``goal``; the solver knows one exists."""
    came: dict[int, tuple[int, str] | None] = {start: None}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if cell == goal:
            break
        for d in DIRECTIONS:
            nxt = cell + offset(d, level.width)
            if nxt not in came and nxt not in level.walls and nxt not in boxes:
                came[nxt] = (cell, d)
                queue.append(nxt)
    path: list[str] = []
    cell = goal
    while (link := came[cell]) is not None:
        cell, d = link
        path.append(d)
    return path[::-1]


def moves_to_solve(
    level: Level,
    boxes: frozenset[int],
    player: int,
    dead: frozenset[int] | None = None,
    max_states: int = 20_000,
) -> int | None:
    """The fewest moves (walks and pushes) that solve ``level`` from ``boxes`` and ``player``;
    None when it cannot be solved from there. Raises :class:`SearchLimit` past ``max_states``
    states: a search over every cell the player stands on, fine for one or two boxes on a
    small board. ``dead``: the level's dead cells, when the caller has them."""
    if boxes == level.goals:
        return 0
    dead = level.dead_cells() if dead is None else dead
    start = (boxes, player)
    seen = {start}
    queue = deque([(start, 0)])
    while queue:
        (now, at), depth = queue.popleft()
        for d in DIRECTIONS:
            step = offset(d, level.width)
            target = at + step
            if target in level.walls:
                continue
            moved = now
            if target in now:
                beyond = target + step
                if beyond in level.walls or beyond in now or beyond in dead:
                    continue
                moved = (now - {target}) | {beyond}
                if beyond not in level.goals and frozen_square(level, moved, beyond):
                    continue
                if moved == level.goals:
                    return depth + 1
            state = (moved, target)
            if state in seen:
                continue
            seen.add(state)
            if len(seen) > max_states:
                raise SearchLimit(f"more than {max_states} states")
            queue.append((state, depth + 1))
    return None

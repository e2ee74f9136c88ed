"""Sokoban boards: standard text notation, the push rule, and deadlock detection.

Cells are flat indices ``row * width + col``. Every board is closed by walls, so moving by a
direction's offset never wraps around a row edge.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

WALL, FLOOR, GOAL, BOX, BOX_ON_GOAL, PLAYER, PLAYER_ON_GOAL = "#", " ", ".", "$", "*", "@", "+"
DIRECTIONS = ("up", "down", "left", "right")
_ROW_COL = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}


def offset(direction: str, width: int) -> int:
    """Flat-index step of ``direction`` on a board ``width`` cells wide."""
    dr, dc = _ROW_COL[direction]
    return dr * width + dc


@dataclass(frozen=True)
class Level:
    """A puzzle: fixed walls and goals, the boxes' and the player's starting cells."""

    width: int
    height: int
    walls: frozenset[int]
    goals: frozenset[int]
    boxes: frozenset[int]
    player: int

    @classmethod
    def parse(cls, text: str) -> Level:
        """Read standard notation; short rows are padded with floor, the outside must be walled."""
        rows = [line.rstrip("\n") for line in text.strip("\n").split("\n")]
        width, height = max(len(r) for r in rows), len(rows)
        walls: set[int] = set()
        goals: set[int] = set()
        boxes: set[int] = set()
        players = []
        for r, row in enumerate(rows):
            for c, ch in enumerate(row.ljust(width)):
                cell = r * width + c
                if ch == WALL:
                    walls.add(cell)
                elif ch in (GOAL, BOX_ON_GOAL, PLAYER_ON_GOAL):
                    goals.add(cell)
                if ch in (BOX, BOX_ON_GOAL):
                    boxes.add(cell)
                elif ch in (PLAYER, PLAYER_ON_GOAL):
                    players.append(cell)
                elif ch not in (WALL, FLOOR, GOAL):
                    raise ValueError(f"unknown Sokoban character {ch!r} at row {r}, column {c}")
        if len(players) != 1:
            raise ValueError(f"a level needs exactly one player, found {len(players)}")
        if len(boxes) != len(goals) or not boxes:
            raise ValueError(
                f"a level needs as many goals as boxes (>0), got {len(goals)}/{len(boxes)}"
            )
        level = cls(width, height, frozenset(walls), frozenset(goals), frozenset(boxes), players[0])
        if not level.is_closed():
            raise ValueError("the player can walk off the board: close the level with walls")
        return level

    def render(self, boxes: Iterable[int] | None = None, player: int | None = None) -> str:
        """Standard notation of this level with ``boxes`` and ``player`` (default: the start)."""
        box_set = self.boxes if boxes is None else frozenset(boxes)
        at = self.player if player is None else player
        lines = []
        for r in range(self.height):
            chars = []
            for c in range(self.width):
                cell = r * self.width + c
                goal = cell in self.goals
                if cell in self.walls:
                    chars.append(WALL)
                elif cell == at:
                    chars.append(PLAYER_ON_GOAL if goal else PLAYER)
                elif cell in box_set:
                    chars.append(BOX_ON_GOAL if goal else BOX)
                else:
                    chars.append(GOAL if goal else FLOOR)
            lines.append("".join(chars).rstrip())
        return "\n".join(lines)

    def neighbours(self, cell: int) -> list[int]:
        return [cell + offset(d, self.width) for d in DIRECTIONS]

    def reachable(self, start: int, boxes: frozenset[int] | set[int]) -> set[int]:
        """Cells the player reaches from ``start`` without pushing."""
        seen = {start}
        queue = deque([start])
        while queue:
            cell = queue.popleft()
            for nxt in self.neighbours(cell):
                if nxt not in seen and nxt not in self.walls and nxt not in boxes:
                    seen.add(nxt)
                    queue.append(nxt)
        return seen

    def is_closed(self) -> bool:
        """No walk from the player leaves the board (reaches its edge)."""
        for cell in self.reachable(self.player, frozenset()):
            r, c = divmod(cell, self.width)
            if r in (0, self.height - 1) or c in (0, self.width - 1):
                return False
        return True

    def dead_cells(self) -> frozenset[int]:
        """Floor cells from which a box can never reach any goal, whatever the other boxes do.

        Found backwards: a box reaches ``g`` from ``g - d`` when the player can stand at
        ``g - 2d``; cells never met this way from a goal are dead (corners, most wall edges).
        """
        live = set(self.goals)
        queue = deque(self.goals)
        while queue:
            cell = queue.popleft()
            for d in DIRECTIONS:
                step = offset(d, self.width)
                before, player = cell - step, cell - 2 * step
                if (
                    before not in live
                    and before not in self.walls
                    and player not in self.walls
                    and 0 <= player < self.width * self.height
                ):
                    live.add(before)
                    queue.append(before)
        floor = self.reachable(self.player, frozenset())
        return frozenset(floor - live)


def frozen_square(level: Level, boxes: frozenset[int] | set[int], box: int) -> bool:
    """``box`` is part of a 2x2 block of boxes and walls holding a box off its goal.

    No box of such a block can ever move: each is held on two sides by the others.
    """
    w = level.width
    for corner in (box, box - 1, box - w, box - w - 1):
        square = (corner, corner + 1, corner + w, corner + w + 1)
        if all(c in boxes or c in level.walls for c in square) and any(
            c in boxes and c not in level.goals for c in square
        ):
            return True
    return False


@dataclass
class Board:
    """A level being played: where the boxes and the player are now."""

    level: Level
    boxes: set[int]
    player: int

    @classmethod
    def start(cls, level: Level) -> Board:
        return cls(level, set(level.boxes), level.player)

    def move(self, direction: str) -> str:
        """Apply one move. Returns ``"walk"``, ``"push"``, ``"wall"`` or ``"blocked"``."""
        step = offset(direction, self.level.width)
        target = self.player + step
        if target in self.level.walls:
            return "wall"
        if target in self.boxes:
            beyond = target + step
            if beyond in self.level.walls or beyond in self.boxes:
                return "blocked"
            self.boxes.remove(target)
            self.boxes.add(beyond)
            self.player = target
            return "push"
        self.player = target
        return "walk"

    def on_goal(self) -> int:
        return len(self.boxes & self.level.goals)

    def solved(self) -> bool:
        return self.boxes == set(self.level.goals)

    def stuck(self, dead: frozenset[int]) -> bool:
        """Some box can provably never reach a goal (dead cell or frozen 2x2 block)."""
        return any(b in dead or frozen_square(self.level, self.boxes, b) for b in self.boxes)

    def render(self) -> str:
        return self.level.render(self.boxes, self.player)

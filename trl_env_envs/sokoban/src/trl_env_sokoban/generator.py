"""Procedural levels from a seed string: solvable by construction (reverse play).

1. Carve a connected room out of solid rock by a random walk.
2. Put the boxes on their goals and the player on a free cell: a solved position.
3. Play backwards: the player walks at random and sometimes *pulls* a box behind it. Each
   pull is a push undone, so the position reached can be pushed back to the solved one.
4. Keep the position with the best score (after gym-sokoban: how often the pulled box changed
   times how far the boxes are from goals). Harder difficulties walk longer and keep the
   hardest of more candidates, by the solver's fewest pushes where the board is small.

All randomness comes from one ``random.Random`` seeded with sha256 of the seed string and the
options, so a seed gives the same level on every machine and Python run. Levels are split in
two classes by a hash of their content (train/eval), so no level can appear in both sets.
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass, replace

from .board import DIRECTIONS, Level, offset
from .solver import SearchLimit, solve

# Bump when generation changes: it is part of every level's random seed, and the README says
# the same seed gives the same level for a given GENERATOR_VERSION.
GENERATOR_VERSION = 1
ATTEMPTS = 200
# Candidates are ranked by the solver's fewest pushes where the search is surely cheap
# (C(floor cells, boxes) small), else by the reverse-play score alone.
SOLVER_MAX_COMBINATIONS = 5_000
SOLVER_MAX_STATES = 3_000


@dataclass(frozen=True)
class Difficulty:
    """How long the backward walk is, and of how many candidates the best-scoring is kept."""

    walk_steps: int  # per box
    candidates: int
    pull_chance: float
    every_box_moved: bool  # no box may start on a goal


DIFFICULTIES = {
    "easy": Difficulty(walk_steps=15, candidates=1, pull_chance=0.6, every_box_moved=False),
    "medium": Difficulty(walk_steps=50, candidates=3, pull_chance=0.7, every_box_moved=True),
    "hard": Difficulty(walk_steps=150, candidates=6, pull_chance=0.8, every_box_moved=True),
}


def rng_for(*parts: object) -> random.Random:
    """A generator seeded by sha256 of ``parts``, independent of PYTHONHASHSEED."""
    text = "\x1f".join(str(p) for p in parts)
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
    return random.Random(int.from_bytes(digest[:16], "big"))


def level_class(level: Level) -> str:
    """``"train"`` or ``"eval"``, from a hash of the puzzle (the player's area, not its cell)."""
    area = min(level.reachable(level.player, level.boxes))
    key = f"{level.width}x{level.height}|{sorted(level.walls)}|{sorted(level.goals)}|"
    key += f"{sorted(level.boxes)}|{area}"
    return "eval" if hashlib.sha256(key.encode()).digest()[0] % 2 else "train"


def generate(
    seed: str, width: int, height: int, boxes: int, difficulty: str, split: str = "train"
) -> Level:
    """The level of ``seed``; ``split`` chooses the hash class it must belong to."""
    return generate_solved(seed, width, height, boxes, difficulty, split).level


@dataclass(frozen=True)
class Generated:
    """A level and the moves that solve it: the backward walk that made it, played forwards."""

    level: Level
    moves: tuple[str, ...]


def generate_solved(
    seed: str, width: int, height: int, boxes: int, difficulty: str, split: str = "train"
) -> Generated:
    """:func:`generate`, with a solution of the level (not the shortest; one that surely works)."""
    preset = DIFFICULTIES[difficulty]
    rng = rng_for("sokoban", GENERATOR_VERSION, width, height, boxes, difficulty, split, seed)
    found = _search(rng, width, height, boxes, preset, split)
    if not found and preset.every_box_moved:
        # Many boxes on a board that fits them (up to a quarter of the inside) rarely leave
        # every goal at once in a random backward walk. Rather than refusing options the env
        # accepts, keep looking with some boxes allowed to start on goals. This only runs
        # where the strict search found nothing, so every level it could make is unchanged.
        found = _search(rng, width, height, boxes, replace(preset, every_box_moved=False), split)
    if not found:
        raise ValueError(
            f"could not generate a {width}x{height} level with {boxes} boxes; "
            "use a bigger board or fewer boxes"
        )
    if len(found) == 1:
        return found[0][1]
    # max() keeps the earliest of equals, so the choice is deterministic.
    return max(found, key=lambda item: (_min_pushes(item[1].level), item[0]))[1]


def _search(
    rng: random.Random, width: int, height: int, boxes: int, preset: Difficulty, split: str
) -> list[tuple[int, Generated]]:
    """Up to ``preset.candidates`` scored levels of ``split``'s class, in ``ATTEMPTS`` rooms."""
    found: list[tuple[int, Generated]] = []
    for _ in range(ATTEMPTS):
        candidate = _candidate(rng, width, height, boxes, preset)
        if candidate is not None and level_class(candidate[1].level) == split:
            found.append(candidate)
            if len(found) == preset.candidates:
                break
    return found


def _min_pushes(level: Level) -> int:
    """Fewest pushes if the solver can tell cheaply, else -1 (rank by score alone)."""
    floor = len(level.reachable(level.player, frozenset()))
    if math.comb(floor, len(level.boxes)) > SOLVER_MAX_COMBINATIONS:
        return -1
    try:
        solution = solve(level, max_states=SOLVER_MAX_STATES)
    except SearchLimit:
        return -1
    if solution is None:  # reverse play cannot make this; fail loudly if it ever does
        raise AssertionError(f"generated an unsolvable level:\n{level.render()}")
    return solution.pushes


def _candidate(
    rng: random.Random, width: int, height: int, n_boxes: int, preset: Difficulty
) -> tuple[int, Generated] | None:
    """A scrambled level and its reverse-play score, or None if this room did not work out."""
    floor = _carve(rng, width, height)
    if len(floor) < n_boxes + 2:
        return None
    cells = sorted(floor)
    goals = rng.sample(cells, n_boxes)
    player = rng.choice([c for c in cells if c not in goals])
    walls = frozenset(range(width * height)) - frozenset(floor)
    found = _reverse_play(rng, width, floor, goals, player, preset)
    if found is None:
        return None
    score, boxes, start, moves = found
    level = Level(width, height, walls, frozenset(goals), frozenset(boxes), start)
    return score, Generated(level, moves)


def _carve(rng: random.Random, width: int, height: int) -> set[int]:
    """A connected set of interior cells, about 50-80% of the interior."""
    inner_w, inner_h = width - 2, height - 2
    target = max(3, round(inner_w * inner_h * rng.uniform(0.5, 0.8)))
    r, c = rng.randrange(1, height - 1), rng.randrange(1, width - 1)
    dr, dc = rng.choice(((-1, 0), (1, 0), (0, -1), (0, 1)))
    floor = {r * width + c}
    for _ in range(inner_w * inner_h * 20):
        if len(floor) >= target:
            break
        if rng.random() < 0.35:
            dr, dc = rng.choice(((-1, 0), (1, 0), (0, -1), (0, 1)))
        nr, nc = r + dr, c + dc
        if not (1 <= nr < height - 1 and 1 <= nc < width - 1):
            continue
        r, c = nr, nc
        floor.add(r * width + c)
        if rng.random() < 0.25:  # widen the corridor now and then: rooms, not only tunnels
            wr, wc = r + rng.choice((-1, 1)) * abs(dc), c + rng.choice((-1, 1)) * abs(dr)
            if 1 <= wr < height - 1 and 1 <= wc < width - 1:
                floor.add(wr * width + wc)
    return floor


def _reverse_play(
    rng: random.Random,
    width: int,
    floor: set[int],
    goals: list[int],
    player: int,
    preset: Difficulty,
) -> tuple[int, list[int], int, tuple[str, ...]] | None:
    """Walk backwards from the solved position; the best-scoring position met, if any.

    Returns its score, boxes, player cell and the forward moves that solve it: each backward
    step, undone. A pull undone is a push the other way, a walk undone a walk back.
    """
    boxes = list(goals)
    goal_set = set(goals)
    # Kept up to date step by step (a pull moves one box), not recounted: that made big boards
    # with many boxes cost seconds per level.
    occupied = set(boxes)
    nearest = {c: min(_manhattan(c, g, width) for g in goals) for c in floor}
    distance, on_goal = 0, len(goals)
    last_pulled, changes = -1, 0
    best: tuple[int, list[int], int, int] | None = None  # score, boxes, player, steps walked
    best_score = 0
    walked: list[str] = []  # directions of the backward steps taken so far
    for _ in range(preset.walk_steps * len(goals)):
        direction = rng.choice(DIRECTIONS)
        step = offset(direction, width)
        ahead, behind = player + step, player - step
        if ahead not in floor or ahead in occupied:
            continue
        if behind in occupied and rng.random() < preset.pull_chance:
            i = boxes.index(behind)
            boxes[i] = player
            occupied.remove(behind)
            occupied.add(player)
            distance += nearest[player] - nearest[behind]
            on_goal += (player in goal_set) - (behind in goal_set)
            if i != last_pulled:
                changes, last_pulled = changes + 1, i
        player = ahead
        walked.append(direction)
        if on_goal == len(goals) or (preset.every_box_moved and on_goal):
            continue
        # Each push moves a box one cell, so the distances to the nearest goals bound the
        # pushes needed from below; alternating between boxes makes the order matter.
        score = (1 + changes) * distance
        if score > best_score:
            best_score, best = score, (score, list(boxes), player, len(walked))
    if best is None:
        return None
    score, start_boxes, start, steps = best
    moves = tuple(_OPPOSITE[d] for d in reversed(walked[:steps]))
    return score, start_boxes, start, moves


_OPPOSITE = {"up": "down", "down": "up", "left": "right", "right": "left"}


def _manhattan(a: int, b: int, width: int) -> int:
    (ar, ac), (br, bc) = divmod(a, width), divmod(b, width)
    return abs(ar - br) + abs(ac - bc)

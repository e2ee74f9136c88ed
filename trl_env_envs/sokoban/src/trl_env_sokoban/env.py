"""The Sokoban environment: one procedural level per seed, moves as text, reward in [0, 1].

Reward, readable at any time from ``env.reward`` (final once ``alive`` is False):

- solved: ``max(0.5, 1 - turn_cost * turns)``: at least 0.5, 1 with the default ``turn_cost=0``;
- otherwise: ``partial_credit * boxes_on_goals / boxes``, plus ``progress_credit`` times the
  share of the way to a solution covered (``1 - moves_left / moves_left_at_start``, the fewest
  moves by the solver; 0 where the board got further away, is lost, or is too big to search).
  The two together are at most 0.5, so solving is always worth more.

The episode ends when every box is on a goal, when a box can provably never reach a goal (a
dead cell such as a corner, or a frozen 2x2 block), or after ``max_turns`` turns. Every reply
uses a turn, readable or not. ``success`` (read once the episode is over) is True when the
board was solved.
"""

from __future__ import annotations

import functools
from typing import Any

from trl_env.envkit import EnvKit, Option

from .actions import parse_moves
from .board import Board, Level
from .generator import DIFFICULTIES, Generated, generate_solved
from .solver import SearchLimit, moves_to_solve, solve

MIN_SOLVED_REWARD = 0.5
MOST_BOXES = (20 - 2) * (20 - 2) // 4  # a quarter of the inside of the largest board


@functools.lru_cache(maxsize=1024)
def cached_level(
    seed: str, width: int, height: int, boxes: int, difficulty: str, split: str
) -> Generated:
    """Levels are immutable, so episodes on the same seed share one generation."""
    return generate_solved(seed, width, height, boxes, difficulty, split)


def split_of(seed: str) -> str:
    """Seeds starting with "eval" draw from the eval class of levels, all others from train."""
    return "eval" if seed.startswith("eval") else "train"


class SokobanEnv(EnvKit):
    """Push every box onto a goal. Options are plain values, as ``--env-arg`` gives them."""

    env_name = "sokoban"
    width = Option(7, "board width including the outer wall", min=5, max=20)
    height = Option(7, "board height including the outer wall", min=5, max=20)
    boxes = Option(
        2, "number of boxes (and goals), at most a quarter of the inside", min=1, max=MOST_BOXES
    )
    difficulty = Option("medium", "how scrambled levels are", choices=tuple(DIFFICULTIES))
    max_turns = Option(30, "turns per episode; every reply uses one", min=1, max=10_000)
    max_moves = Option(10, "moves one reply may hold; 1 allows a single move", min=1, max=1_000)
    partial_credit = Option(
        0.2, "reward for boxes on goals when unsolved", min=0.0, max=MIN_SOLVED_REWARD
    )
    turn_cost = Option(
        0.0, "subtracted from the solve reward per turn (floor 0.5)", max=1.0, min=0.0
    )
    progress_credit = Option(
        0.0,
        "reward, when unsolved, for the share of the way to a solution covered (fewest moves "
        "left against the start's); with partial_credit at most 0.5",
        min=0.0,
        max=MIN_SOLVED_REWARD,
    )
    describe = Option(
        False,
        "each view also says, in moves, where each box off a goal is from you and where the "
        "nearest free goal is from that box",
    )

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        most = max(1, (self.width - 2) * (self.height - 2) // 4)
        if self.boxes > most:
            raise self.refuse("boxes", f"at most {most} on a {self.width}x{self.height} board")
        if self.partial_credit + self.progress_credit > MIN_SOLVED_REWARD:
            raise self.refuse(
                "progress_credit",
                f"at most {MIN_SOLVED_REWARD - self.partial_credit:g} with partial_credit "
                f"{self.partial_credit:g} (together at most {MIN_SOLVED_REWARD})",
            )
        self._moves_at_start: int | None = None
        self.turns = 0
        self.outcome = "not started"
        self.board: Board | None = None
        self._dead: frozenset[int] = frozenset()

    # -- optional extras --------------------------------------------------------------
    @property
    def system_prompt(self) -> str:
        several = (
            f" You may give up to {self.max_moves} moves in one reply, e.g. `left left up`; "
            "they are played in order and stop at the first one that is blocked."
            if self.max_moves > 1
            else ""
        )
        return (
            "You are playing Sokoban. Push every box onto a goal.\n"
            "The board uses the standard symbols: # wall, @ you, + you on a goal, $ box, "
            "* box on a goal, . goal, space floor.\n"
            "Each turn, reply with a move: up, down, left or right (u, d, l, r work too). "
            "You walk onto free floor; walking into a box pushes it one cell if the cell behind "
            "it is free. You cannot pull boxes or push two boxes at once, so a box pushed into "
            f"a corner that is not a goal is lost and the game ends.{several}\n"
            f"You have {self.max_turns} turns. Solving the level scores most; "
            "boxes on goals score a little."
        )

    @property
    def success(self) -> bool:
        """Every box is on a goal (read once the episode is over)."""
        return self.outcome == "solved"

    # -- protocol -----------------------------------------------------------------------
    def level(self, seed: str) -> Level:
        """The level a seed plays, with this env's options."""
        return self._generated(seed).level

    def solution(self, seed: str) -> tuple[str, ...]:
        """Moves that solve the seed's level (how it was made; rarely the shortest)."""
        return self._generated(seed).moves

    def demonstrate(self, seed: str) -> list[str]:
        """The solver's fewest-push solution (the generator's where the search is too big), up
        to ``max_moves`` moves a reply."""
        try:
            found = solve(self.level(seed))
        except SearchLimit:
            found = None
        moves = found.moves if found is not None else list(self.solution(seed))
        size = self.max_moves
        return [" ".join(moves[i : i + size]) for i in range(0, len(moves), size)]

    def _generated(self, seed: str) -> Generated:
        seed = str(seed)
        return cached_level(
            seed, self.width, self.height, self.boxes, self.difficulty, split_of(seed)
        )

    def reset(self, seed: str) -> str:
        level = self.level(seed)
        self.board = Board.start(level)
        self._dead = level.dead_cells()
        self.turns, self.alive, self.outcome = 0, True, "playing"
        self._moves_at_start = self._moves_left() if self.progress_credit else None
        self.reward = self._score()  # the current board's score, from the start (see README)
        return f"Push every box ($) onto a goal (.).\n{self._view()}"

    def step(self, action: str) -> str:
        if not self.alive or self.board is None:
            return self._over_message()
        self.turns += 1
        moves = parse_moves(action) if isinstance(action, str) else []
        if not moves:
            head = "I could not read a move. Reply with up, down, left or right" + (
                ", or several, e.g. `left left up`." if self.max_moves > 1 else "."
            )
            self._finish_turn()
            return f"{head} {self._status()}" if self.alive else f"{head}\n{self._view()}"
        head = self._play(moves)
        self._finish_turn()
        return f"{head}\n{self._view()}"

    # -- rules --------------------------------------------------------------------------
    def _play(self, moves: list[str]) -> str:
        assert self.board is not None
        played: list[str] = []
        note = ""
        for move in moves[: self.max_moves]:
            result = self.board.move(move)
            if result in ("wall", "blocked"):
                why = "by a wall" if result == "wall" else "because the box cannot move"
                note = f"{move} is blocked {why}" + ("; stopped there." if played else ".")
                break
            played.append(f"{move} (push)" if result == "push" else move)
            if self.board.solved() or self.board.stuck(self._dead):
                break
        else:
            if len(moves) > self.max_moves:
                note = f"Only the first {self.max_moves} moves were played."
        if not played:
            return f"You did not move: {note}" if note else "You did not move."
        return f"Moved {', '.join(played)}. {note}".rstrip()

    def _finish_turn(self) -> None:
        assert self.board is not None
        if self.board.solved():
            self.alive, self.outcome = False, "solved"
        elif self.board.stuck(self._dead):
            self.alive, self.outcome = False, "stuck"
        elif self.turns >= self.max_turns:
            self.alive, self.outcome = False, "out of turns"
        self.reward = self._score()

    def _score(self) -> float:
        assert self.board is not None
        if self.outcome == "solved":
            return max(MIN_SOLVED_REWARD, 1.0 - self.turn_cost * self.turns)
        credit = self.partial_credit * self.board.on_goal() / len(self.board.level.boxes)
        start = self._moves_at_start
        if start and self.outcome != "stuck":
            left = self._moves_left()
            if left is not None:
                credit += self.progress_credit * max(0.0, 1.0 - left / start)
        return credit

    def _moves_left(self) -> int | None:
        """Fewest moves that solve the board from here; None: lost, or too big to search."""
        assert self.board is not None
        try:
            return moves_to_solve(
                self.board.level, frozenset(self.board.boxes), self.board.player, self._dead
            )
        except SearchLimit:
            return None

    def _status(self) -> str:
        assert self.board is not None
        goals = f"Boxes on goals: {self.board.on_goal()}/{len(self.board.level.boxes)}."
        if self.outcome == "solved":
            return f"{goals} Solved in {self.turns} turn{'s' if self.turns != 1 else ''}!"
        if self.outcome == "stuck":
            return f"{goals} Stuck: a box can no longer reach a goal. Game over."
        if self.outcome == "out of turns":
            return f"{goals} Out of turns. Game over."
        left = self.max_turns - self.turns
        return f"{goals} Turns left: {left}."

    def _view(self) -> str:
        assert self.board is not None
        where = self._where() if self.describe else ""
        where = f"\n{where}" if where else ""
        return f"{self.board.render()}{where}\n{self._status()}"

    def _where(self) -> str:
        """Where each box off a goal is from the player, and the nearest free goal from it."""
        assert self.board is not None
        board, width = self.board, self.board.level.width
        free = sorted(board.level.goals - board.boxes)
        lines = []
        for box in sorted(board.boxes - board.level.goals):
            goal = min(free, key=lambda g: _distance(box, g, width))
            lines.append(
                f"A box is {_away(board.player, box, width)} from you; the nearest free goal is "
                f"{_away(box, goal, width)} from that box."
            )
        return "\n".join(lines)

    def _over_message(self) -> str:
        if self.board is None:
            return "The game has not started: call reset(seed) first."
        return f"The game is over ({self.outcome}). Start a new episode to play again."


def _distance(a: int, b: int, width: int) -> int:
    (ra, ca), (rb, cb) = divmod(a, width), divmod(b, width)
    return abs(ra - rb) + abs(ca - cb)


def _away(a: int, b: int, width: int) -> str:
    """Where cell ``b`` is from cell ``a`` in moves: "2 down and 1 left"."""
    (ra, ca), (rb, cb) = divmod(a, width), divmod(b, width)
    parts = []
    if rb != ra:
        parts.append(f"{abs(rb - ra)} {'down' if rb > ra else 'up'}")
    if cb != ca:
        parts.append(f"{abs(cb - ca)} {'right' if cb > ca else 'left'}")
    return " and ".join(parts) or "0"

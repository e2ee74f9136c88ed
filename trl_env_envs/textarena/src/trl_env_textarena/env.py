"""The ``textarena`` env: one TextArena single-player game per episode.

Each reply of the model is one TextArena ``step``; the env's answer is what the game said to the
player since (its own echo of the move left out), then, when the game is over, its reason.
TextArena's observation wrappers, which repeat the whole history every turn, are not used: the
chat already holds it. Its action wrappers (``[move]`` brackets added when missing) are kept.

Reward, success, end:

- ``reward`` is 0 until the game ends, then TextArena's reward for player 0: 1 for a win, a
  partial score (progress, share solved) or -1 for a second invalid move in a row, as each
  game defines it;
- ``alive`` turns False when TextArena says the game is done, or after ``max_turns`` replies
  (reward 0 then, the game had no outcome);
- ``success``: the game ended with TextArena's full reward (``reward >= 1``), its win.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from trl_env.envkit import EnvKit, Option, stable_int
from trl_env.errors import TrlEnvError

from .demos import solver_for
from .games import DEFAULT_GAME, GAMES, missing_data

# When the game states no turn limit of its own.
DEFAULT_TURN_LIMIT = 200
# A game is an eval game when its fingerprint's first byte is below this (a quarter of them).
EVAL_BYTE_BELOW = 64
# Games tried per seed to find one of the seed's split; games whose content does not vary
# with the seed (Countdown-v0, Cryptarithm-v0) or is drawn later (Minesweeper's mines, at the
# first move) have one split only, and every seed then plays its first try.
SPLIT_TRIES = 64
SAME_GAME_TRIES = 8  # starts that are all the same game: the seed does not change it


class MissingDataError(TrlEnvError):
    """A game needs data that is not installed (NLTK word lists)."""

    exit_code = 2


class TextArenaEnv(EnvKit):
    """Play the TextArena game ``game`` (default ``Mastermind-v0``) as player 0."""

    env_name = "textarena"
    # Every TextArena call holds one process-wide lock (runner.call): episodes sharing a process
    # take turns, and a slow game's calls time out waiting (RushHour: 7 of 8 episodes under
    # thread isolation). Auto isolation, the default, plays it in worker processes; the same
    # ask is in this distribution's metadata, read without importing it.
    isolation = "process"
    game = Option(DEFAULT_GAME, "the TextArena game id to play", choices=tuple(GAMES))
    turn_limit = Option(
        None,
        "replies per episode; none: twice the game's own turn limit (an invalid move gets one "
        f"retry), {DEFAULT_TURN_LIMIT} for a game without one",
        type=int,
        min=1,
    )

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        missing = missing_data(self.game)
        if missing:
            names = " and ".join(missing)
            raise MissingDataError(
                f"TextArena's {self.game} needs the NLTK data {names}, which is not installed: "
                f"run `python -m nltk.downloader {' '.join(missing)}` on a machine with "
                "network access (or copy an nltk_data folder to one of nltk.data.path)."
            )
        from . import runner

        self._runner = runner
        self._streams = runner.Streams()
        self._game, self._core = runner.call(self._streams, _make, self.game)
        own = getattr(self._core, "max_turns", None)
        self.max_turns: int = self.turn_limit or (
            2 * int(own) if isinstance(own, int | float) and own > 0 else DEFAULT_TURN_LIMIT
        )
        self.turns = 0
        self.outcome = ""
        self.started = False

    # -- optional extras --------------------------------------------------------------------
    @property  # type: ignore[misc]  # EnvKit's can be assigned
    def system_prompt(self) -> str:
        return (
            f"You are playing {self.game}, a game of TextArena. Its first message gives the "
            "rules and how to write a move. Reply with one move per turn, in that format "
            "(usually in square brackets, e.g. [A C]). An invalid move gets one retry; a second "
            f"one in a row may end the game. You have at most {self.max_turns} replies."
        )

    @property
    def success(self) -> bool:
        """The game ended in TextArena's win (its full reward of 1)."""
        return bool(self.started and not self.alive and self.outcome and self.reward >= 1.0)

    def demonstrate(self, seed: str) -> list[str] | None:
        """The replies of a winning episode of ``seed``: Mastermind (the code), GuessTheNumber
        (the number) and TowerOfHanoi (the shortest solution); None for other games, and when
        the win takes more replies than ``max_turns``."""
        solver = solver_for(self.game)
        if solver is None:
            return None
        fresh = type(self)(**self.options)  # this env's episode is left as it is
        fresh.reset(seed)
        actions = solver(fresh._core)
        return actions if len(actions) <= self.max_turns else None

    # -- protocol -----------------------------------------------------------------------------
    def reset(self, seed: str) -> str:
        seed = str(seed)
        want = self.split_of(seed)
        numbers = [
            stable_int(f"textarena:{self.game}:{seed}:{attempt}") % 2**32
            for attempt in range(SPLIT_TRIES)
        ]
        seen = set()
        for attempt, number in enumerate(numbers):
            text = self._start(number)
            content = fingerprint(self._core)
            if want is None or content_split(content) == want:
                return text
            seen.add(content)
            if attempt + 1 == SAME_GAME_TRIES and len(seen) == 1:
                break  # the seed does not change this game's start: it has one split only
        return self._start(numbers[0])

    def step(self, action: str) -> str:
        if not self.started:
            return "The game has not started: call reset(seed) first."
        if not self.alive:
            return f"The game is over ({self.outcome}). Start a new episode to play again."
        action = action if isinstance(action, str) else str(action)
        self.turns += 1
        try:
            done, _ = self._call(self._game.step, action)
        except Exception as exc:  # a game that cannot parse a reply (a 5000-digit number)
            self._call(self._game.get_observation)  # drop the echo of the move
            reply = (
                f"The game could not read that move ({type(exc).__name__}: "
                f"{str(exc)[:120]}). Reply with one move in the game's format."
            )
            return reply + self._turn_check()
        text = self._observation()
        if done:
            rewards, info = self._call(self._game.close)
            self.reward = float((rewards or {}).get(0, 0.0))
            self.outcome = str((info or {}).get(0, {}).get("reason") or "game over")
            self.alive = False
            ending = "" if self.outcome.endswith((".", "!", "?")) else "."
            return _join(text, f"Game over: {self.outcome}{ending} Reward {self.reward:g}.")
        tail = self._turn_check()
        return text + tail if text else tail.lstrip() or "The game said nothing; your next move?"

    def _turn_check(self) -> str:
        """End the episode at ``max_turns`` replies; the text to append, if it ended."""
        if self.turns < self.max_turns:
            return ""
        self.alive, self.reward = False, 0.0
        self.outcome = f"out of turns after {self.turns} replies"
        return f"\n\nOut of turns: the game had no outcome after {self.turns} replies."

    # -- TextArena ----------------------------------------------------------------------------
    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return self._runner.call(self._streams, fn, *args, **kwargs)

    def _start(self, number: int) -> str:
        self._streams.seed(number)
        self._call(self._game.reset, num_players=1, seed=number)
        self.turns, self.outcome, self.reward = 0, "", 0.0
        self.alive = self.started = True
        return self._observation()

    def _observation(self) -> str:
        """What the game told player 0 since the last call, without the echo of its move."""
        _, messages = self._call(self._game.get_observation)
        from textarena import ObservationType

        parts = [
            str(text).strip()
            for _, text, kind in messages
            if kind is not ObservationType.PLAYER_ACTION and str(text).strip()
        ]
        return "\n\n".join(parts)


def _make(game: str) -> tuple[Any, Any]:
    """The game with TextArena's action wrappers only, and the bare game inside it."""
    import textarena as ta

    wrapped = ta.make(game)
    layers = []
    core = wrapped
    while isinstance(core, ta.Wrapper):
        layers.append(type(core))
        core = core.env
    env = core
    for layer in reversed(layers):
        if issubclass(layer, ta.ActionWrapper):
            env = layer(env)
    return env, core


def _join(text: str, tail: str) -> str:
    return f"{text}\n\n{tail}" if text else tail


def fingerprint(core: Any) -> str:
    """A hash of a freshly reset game's content (its state and the env's own attributes), the
    same in every process: sets are sorted and objects read through their attributes."""
    content = {
        "state": getattr(getattr(core, "state", None), "game_state", None),
        "env": {k: v for k, v in vars(core).items() if k not in ("state", "env_id")},
    }
    text = json.dumps(_plain(content, 0), sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def content_split(content: str) -> str:
    """The split of a game whose :func:`fingerprint` is ``content``."""
    return "eval" if int(content[:2], 16) < EVAL_BYTE_BELOW else "train"


def _plain(value: Any, depth: int) -> Any:
    """``value`` as JSON data with no order or address that changes between processes."""
    if depth > 8:
        return type(value).__name__
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, dict):
        return {str(k): _plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v, depth + 1) for v in value]
    if isinstance(value, set | frozenset):
        items = [_plain(v, depth + 1) for v in value]
        return sorted(items, key=lambda v: json.dumps(v, default=str))
    tolist = getattr(value, "tolist", None)  # numpy arrays and scalars
    if callable(tolist):
        return _plain(tolist(), depth + 1)
    if callable(value) or isinstance(value, type):
        return getattr(value, "__qualname__", type(value).__name__)
    if hasattr(value, "__dict__"):
        return {"@": type(value).__name__, **_plain(vars(value), depth + 1)}
    return type(value).__name__

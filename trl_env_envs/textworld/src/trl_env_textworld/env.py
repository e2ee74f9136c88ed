"""The ``textworld`` env: one generated TextWorld game per seed, played command by command.

The first prompt is the game's objective and the room the player starts in; each reply is one
command typed into the game, and the env answers with the game's text (its prompt and status
line left out), then, with ``admissible_commands``, the commands that do something there.

Reward, success, end:

- ``reward`` is the game's score over its maximum after every command (TextWorld's quests
  score their last step, so it is mostly 0 until the quest is done), 1.0 when the game is won;
- ``alive`` turns False when the game is won or lost, or after ``max_turns`` commands;
- ``success``: the game was won.

Commands that would leave the game for the interpreter (``quit``, ``restart``, ``save``,
``restore``, ``undo``, ``script``), alone or as one sentence of a reply (``look. quit``), are
refused: the interpreter would wait for a yes or no forever. A reply is read as its first
non-empty line, in printable ASCII without backslashes, at most :data:`MAX_COMMAND` characters:
the Z-machine interpreter crashes its process on a NUL byte, and reads a backslash as a key of
its own (``\\U``, its undo key, crashed it; after ``\\n`` it waited for input forever).
"""

from __future__ import annotations

import re
import threading
import warnings
from typing import Any

from trl_env.envkit import EnvKit, Option

from .games import Game, Shape, game_for

MAX_COMMAND = 197  # jericho truncates (with a warning) an action of 198 bytes or more
# Interpreter commands: each asks "are you sure?" and the game then answers nothing else.
META = frozenset({"quit", "q", "restart", "save", "restore", "undo", "script", "unscript",
                  "noscript", "transcript"})  # fmt: skip
# Neither reaches the interpreter: what is not printable ASCII, and backslashes (its key escapes)
_UNSAFE = re.compile(r"[^\x20-\x7e]+|\\+")
# Inform runs "look. quit" and "look then quit" as two commands: each is checked.
_SENTENCES = re.compile(r"\.|\bthen\b", re.IGNORECASE)
_BLANKS = re.compile(r"\n{3,}")
_RESTART_QUESTION = "Would you like to RESTART"
# TextWorld reads a game's logic with one parser per process (tatsu's, shared and stateful): two
# threads loading games at once fail with parse errors; stepping a loaded game is safe.
_LOADING = threading.Lock()


def command_of(action: str) -> str:
    """The command a reply gives: its first non-empty line, without a ``>`` prompt, quotes or
    backticks around it, in printable ASCII without backslashes, cut to :data:`MAX_COMMAND`
    characters."""
    for line in str(action).splitlines():
        text = " ".join(_UNSAFE.sub(" ", line).split())
        text = text.lstrip("> ").strip("`'\"* ")
        if text:
            return text[:MAX_COMMAND]
    return ""


def interpreter_command(command: str) -> str | None:
    """The interpreter command (:data:`META`) that opens one of the command's sentences, if any."""
    for sentence in _SENTENCES.split(command):
        words = re.findall(r"[a-z]+", sentence.lower())
        if words and words[0] in META:
            return words[0]
    return None


def game_text(feedback: str) -> str:
    """The game's text without the interpreter's prompt, status line and restart question, and
    without the indentation it centres lines with (``*** The End ***``)."""
    lines = [line.strip() for line in str(feedback).splitlines()]
    while lines and (not lines[-1].strip() or lines[-1].lstrip().startswith(">")):
        lines.pop()
    lines = [line for line in lines if not line.startswith(_RESTART_QUESTION)]
    return _BLANKS.sub("\n\n", "\n".join(lines)).strip()


class TextWorldEnv(EnvKit):
    """A TextWorld game generated from the seed (``tw-make custom``'s world), one command a
    turn."""

    env_name = "textworld"
    world_size = Option(3, "rooms in the world (tw-make's --world-size)", min=1, max=20)
    nb_objects = Option(
        4, "objects in the world, the quest's included (tw-make's --nb-objects)", min=1, max=40
    )
    quest_length = Option(
        3,
        "steps of the quest (tw-make's --quest-length); its walkthrough takes at most as many",
        min=1,
        max=10,
    )
    max_turns = Option(10, "commands per episode (at least quest_length)", min=1, max=200)
    admissible_commands = Option(
        True, "after each observation, list the commands that do something there"
    )
    # The first reset of a seed makes and compiles its game (seconds to a minute under load).
    reset_timeout = 600.0

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        if self.max_turns < self.quest_length:
            raise self.refuse("max_turns", f"at least quest_length ({self.quest_length})")
        self.shape = Shape(self.world_size, self.nb_objects, self.quest_length)
        self.game: Game | None = None
        self._play: Any = None  # TextWorld's env of the episode
        self.turns = 0
        self.score = 0
        self.max_score = 1
        self.won = self.lost = False
        self.started = False
        self._listed = ""  # the commands listed after the last observation

    # -- optional extras --------------------------------------------------------------------
    @property  # type: ignore[misc]  # EnvKit's can be assigned
    def system_prompt(self) -> str:
        listed = (
            " After each observation the game lists the commands that do something there."
            if self.admissible_commands
            else ""
        )
        return (
            "You are playing a text adventure (a TextWorld game). The first message gives your "
            "quest and the room you are in. Each turn, reply with exactly one command for the "
            "game, such as: go north, take key, open chest, put apple on table, unlock door "
            f"with key, look, inventory.{listed} Finish the quest within {self.max_turns} "
            "commands to win."
        )

    @property
    def success(self) -> bool:
        """The game was won."""
        return self.won

    def demonstrate(self, seed: str) -> list[str] | None:
        """The game's own walkthrough (None when it is longer than ``max_turns``)."""
        walkthrough = list(game_for(self.shape, str(seed), self.split_of(str(seed))).walkthrough)
        return walkthrough if len(walkthrough) <= self.max_turns else None

    def close(self) -> None:
        play, self._play = self._play, None
        if play is not None:
            play.close()

    # -- protocol -----------------------------------------------------------------------------
    def reset(self, seed: str) -> str:
        seed = str(seed)
        self.game = game_for(self.shape, seed, self.split_of(seed))
        self.close()
        import textworld

        infos = textworld.EnvInfos(
            admissible_commands=True,
            objective=True,
            description=True,
            score=True,
            max_score=True,
            won=True,
            lost=True,
        )
        with _LOADING, warnings.catch_warnings():
            # jericho says each TextWorld game "is not fully supported" (its own score and change
            # detection); the score read here is TextWorld's, so the warning, at every reset,
            # says nothing a player of this env needs.
            warnings.filterwarnings("ignore", message=r".*is not fully supported")
            self._play = textworld.start(str(self.game.path), request_infos=infos)
            state = self._play.reset()
        self.turns, self.score, self.reward = 0, 0, 0.0
        self.max_score = max(1, int(state["max_score"] or 1))
        self.won = self.lost = False
        self.alive = self.started = True
        text = f"{str(state['objective']).strip()}\n\n{game_text(state['description'])}"
        return text + self._commands(state)

    def step(self, action: str) -> str:
        if not self.started:
            return "The game has not started: call reset(seed) first."
        if not self.alive:
            return "The game is over. Start a new episode to play again."
        self.turns += 1
        command = command_of(action)
        if not command:
            text = "Reply with one command for the game, such as: look."
        elif meta := interpreter_command(command):
            text = f"{meta!r} is not a command of this game."
        else:
            state, score, done = self._play.step(command)
            self.score = int(score or 0)
            self.won, self.lost = bool(state["won"]), bool(state["lost"])
            self.reward = 1.0 if self.won else min(1.0, self.score / self.max_score)
            text = game_text(state.feedback) or "The game says nothing."
            self._commands(state)
            if done or self.won or self.lost:
                self.alive = False
                self.close()
                return text
        if self.turns >= self.max_turns:
            self.alive = False
            self.close()
            return (
                f"{text}\n\nOut of turns: {self.turns} commands played, score {self.score} "
                f"of {self.max_score}."
            )
        return text + self._listed

    def _commands(self, state: Any) -> str:
        """The commands to list after an observation of ``state`` (kept for a refused reply)."""
        commands = sorted(str(c) for c in state["admissible_commands"] or ())
        listed = f"\n\nCommands you can use: {', '.join(commands)}." if commands else ""
        self._listed = listed if self.admissible_commands else ""
        return self._listed

"""The TextWorld env: conformance, seeds and the held-out class, the game cache, the commands it
refuses, and the CLI's commands on the tiny model.

Games are made once into the trl-env cache (``TRL_ENV_CACHE``); a fresh cache makes the first
run of this file take a minute or two (TextWorld's generator and Inform 7), later runs seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import MappingProxyType

import pytest

from trl_env.testing.env_tests import EnvTests
from trl_env.testing.envs import check_hash_independent
from trl_env_textworld import TextWorldEnv, TextWorldError, command_of, game_text
from trl_env_textworld.env import interpreter_command
from trl_env_textworld.games import quest_split

README = Path(__file__).parents[1] / "README.md"
# The default game without its command list, and fewer turns: the same games, none made anew.
SMALL = MappingProxyType({"max_turns": 3, "admissible_commands": False})


class TestTextWorldKit(EnvTests):
    env = TextWorldEnv
    module = "trl_env_textworld"
    options = ({}, SMALL)
    actions = ("look", "go north", "go east", "take key", "open chest", "inventory", "eat apple")
    check = MappingProxyType({"episodes": 8, "examples": 12})
    bad_options = (
        ({"quest_length": 4, "max_turns": 3}, ValueError),
        ({"world_size": 0}, ValueError),
        ({"quest_length": 11}, ValueError),
        ({"nb_objects": "4"}, TypeError),
        ({"admissible_commands": 1}, TypeError),
        ({"quest": 3}, TypeError),
    )
    readme = README
    readme_seed = "eval-0"
    readme_actions = (
        "What should I do?", "quit", "go north", "go south", "go east", "take candy bar",
        "eat candy bar",
    )  # fmt: skip

    def readme_reply(self, text: str, env: TextWorldEnv) -> str:
        first, *rest = text.split("\n")
        return "env:   " + first + "".join(f"\n       {line}" if line else "\n" for line in rest)

    def readme_first(self, text: str) -> str:
        return self.readme_reply(text, None)  # type: ignore[arg-type]


def python(script: str, timeout: float = 600) -> str:
    """What ``script`` prints, run in a fresh Python process (which must exit cleanly)."""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=timeout, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


# -- seeds and the held-out class -------------------------------------------------------------
def test_each_seed_is_one_game_and_eval_seeds_play_held_out_quests() -> None:
    env = TextWorldEnv()
    walkthroughs = {}
    for seed in ("train-0", "train-1", "train-2", "eval-0", "eval-1"):
        first = env.reset(seed)
        assert TextWorldEnv().reset(seed) == first
        walkthroughs[seed] = env.demonstrate(seed)
        assert quest_split(walkthroughs[seed]) == seed.split("-")[0]
    assert len({tuple(w) for w in walkthroughs.values()}) == len(walkthroughs)


def test_episodes_in_threads_start_as_one_alone_does() -> None:
    """Thread isolation plays a batch's episodes in threads: TextWorld's logic parser is one per
    process, and the first games a process loaded at once failed (FailedParse, IndexError)."""
    script = (
        "import json\nfrom concurrent.futures import ThreadPoolExecutor\n"
        "from trl_env_textworld import TextWorldEnv\n"
        "seeds = ['train-0', 'train-1', 'eval-0', 'eval-1'] * 2\n"
        "with ThreadPoolExecutor(len(seeds)) as pool:\n"
        "    together = list(pool.map(lambda seed: TextWorldEnv().reset(seed), seeds))\n"
        "print(json.dumps([together, [TextWorldEnv().reset(seed) for seed in seeds]]))\n"
    )
    together, alone = json.loads(python(script))
    assert together == alone


def test_games_do_not_depend_on_hash_randomization() -> None:
    check_hash_independent(
        "trl_env_textworld:TextWorldEnv", ["train-0", "eval-0"], ["look", "go east", "inventory"]
    )


def test_reward_is_the_score_over_the_maximum_and_a_win_ends_the_game() -> None:
    env = TextWorldEnv()
    walkthrough = env.demonstrate("train-1")
    assert walkthrough
    env.reset("train-1")
    for action in walkthrough[:-1]:
        env.step(action)
        assert env.alive and env.reward == env.score / env.max_score < 1.0
    text = env.step(walkthrough[-1])
    assert (env.alive, env.reward, env.success, env.won) == (False, 1.0, True, True)
    assert "The End" in text and "RESTART" not in text
    assert env.step("look") == "The game is over. Start a new episode to play again."


def test_out_of_turns_ends_the_episode_with_the_score_so_far() -> None:
    env = TextWorldEnv(**SMALL)
    assert "Commands you can use" not in env.reset("train-0")
    assert "Commands you can use" not in env.step("look")
    env.step("inventory")
    text = env.step("look")
    assert not env.alive and env.reward == 0.0 and not env.success
    assert text.endswith(f"Out of turns: 3 commands played, score 0 of {env.max_score}.")


# -- what reaches the game ----------------------------------------------------------------------
def test_interpreter_commands_are_refused_and_the_game_goes_on() -> None:
    env = TextWorldEnv()
    first = env.reset("train-0")
    listed = first[first.index("\n\nCommands you can use") :]
    refused = {"quit": "quit", "RESTART": "restart", "save game": "save", "> script": "script",
               "quit.": "quit", "look. undo": "undo", "look then restore": "restore"}  # fmt: skip
    for command, word in refused.items():
        assert env.step(command) == f"{word!r} is not a command of this game.{listed}"
    assert interpreter_command("take type Q keycard") is None  # a name, not a command
    room = game_text(env._play.reset()["description"]).splitlines()[0]  # type: ignore[union-attr]
    assert room in env.step("look")


@pytest.mark.parametrize(
    ("reply", "command"),
    [
        ("go east", "go east"),
        ("\n\n  > `take key`\nand then something", "take key"),
        ("open\x00 chest", "open chest"),
        ("é go — west", "go west"),
        ("\x00\x01\n", ""),
        ("x" * 500, "x" * 197),  # jericho truncates 198 bytes and more, with a warning
        ("\\Upction<|quad_end|>ser", "Upction<|quad_end|>ser"),  # the tiny model's, once
        ("look\\n", "look n"),
    ],
)
def test_a_reply_is_read_as_one_printable_command(reply: str, command: str) -> None:
    assert command_of(reply) == command


def test_what_stops_the_interpreter_never_reaches_it() -> None:
    """Jericho's interpreter ends the process with a segmentation fault on a NUL byte and on
    ``\\U`` (a backslash starts a key of its own); after ``\\n`` it waits for input forever."""
    script = (
        "from trl_env_textworld import TextWorldEnv\n"
        "env = TextWorldEnv()\nenv.reset('train-0')\n"
        "print(repr(env.step('look\\x00 \\x00')), repr(env.step('\\x00')))\n"
        "for reply in ('\\\\Upction', '\\\\n', '\\\\X', '\\\\N', 'look\\\\'):\n"
        "    print('the game says', bool(env.step(reply)))\n"
    )
    out = python(script, timeout=120)  # a waiting interpreter would hold it to the end
    assert "Reply with one command for the game" in out
    assert out.count("the game says True") == 5, out


def test_game_text_drops_the_interpreter_prompt_and_status_line() -> None:
    feedback = "\nYou open the box.\n\n\n\n>        -= Kitchen =-0/3\n"
    assert game_text(feedback) == "You open the box."
    won = "\nDone.\n\n   *** The End ***\n\nWould you like to RESTART, RESTORE or QUIT?\n>  "
    assert game_text(won) == "Done.\n\n*** The End ***"


# -- the cache --------------------------------------------------------------------------------
def test_two_processes_making_the_same_game_share_one(tmp_path: Path) -> None:
    """A fresh cache, one seed asked for by two processes at once: one game folder, the same
    walkthrough, no temporary folders left."""
    script = (
        "import json\nfrom trl_env_textworld.games import Shape, game_for\n"
        "game = game_for(Shape(1, 2, 1), 'train-7', 'train')\n"
        "print(json.dumps([str(game.path), list(game.walkthrough)]))\n"
    )
    env = {**os.environ, "TRL_ENV_CACHE": str(tmp_path)}
    procs = [
        subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
        for _ in range(2)
    ]  # fmt: skip
    outs = []
    for proc in procs:
        out, err = proc.communicate(timeout=900)
        assert proc.returncode == 0, err[-2000:]
        outs.append(json.loads(out))
    assert outs[0] == outs[1]
    (root,) = (tmp_path / "textworld").iterdir()
    assert [p.name for p in (root / "games").iterdir()] == [Path(outs[0][0]).parent.name]
    assert len(list((root / "seeds").iterdir())) == 1


def test_a_cache_that_cannot_be_written_is_one_sentence(tmp_path: Path, monkeypatch) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("TRL_ENV_CACHE", str(blocked))
    with pytest.raises(TextWorldError, match=r"cache .*a-file.* cannot be used.*TRL_ENV_CACHE"):
        TextWorldEnv().reset("train-0")

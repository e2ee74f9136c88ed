"""The TextArena env: conformance, seeds and splits, outcomes, demonstrations, prints, data."""

from __future__ import annotations

import re
import sys
import threading
from pathlib import Path
from types import MappingProxyType

import pytest

from trl_env import load_env
from trl_env.testing.env_tests import EnvTests
from trl_env.testing.envs import check_hash_independent
from trl_env_textarena import GAMES, MissingDataError, TextArenaEnv
from trl_env_textarena.demos import SOLVERS

README = Path(__file__).parents[1] / "README.md"


class TestTextArenaKit(EnvTests):
    env = TextArenaEnv
    module = "trl_env_textarena"
    options = (
        {},
        {"game": "TowerOfHanoi-v0", "turn_limit": 6},
        {"game": "GuessTheNumber-v0"},
        {"game": "2048-v0-ultra-easy", "turn_limit": 12},
    )
    actions = ("[1 2 3 4]", "[6 5 4 3]", "[A C]", "[B]", "[10]", "up", "[Left]", "2 1 4 5")
    reward_range = (-1.0, 1.0)  # TextArena's own: -1 for repeated invalid moves, 1 for a win
    check = MappingProxyType({"episodes": 12, "examples": 20})
    bad_options = (
        ({"game": "TicTacToe-v0"}, ValueError),  # two players: no offline opponent
        ({"game": "Mastermind"}, ValueError),
        ({"game": 3}, TypeError),
        ({"turn_limit": 0}, ValueError),
        ({"turn_limit": "5"}, TypeError),
    )
    readme = README
    readme_seed = "eval-0"
    readme_actions = ("I will start with [1 2 3 4].", "[1 1 2 3]", "[2 1 4 3]", "2 1 3 5")

    def readme_reply(self, text: str, env: TextArenaEnv) -> str:
        return "env:   " + text.replace("\n", "\n       ")

    def readme_first(self, text: str) -> str:
        return self.readme_reply(text, None)  # type: ignore[arg-type]


def code_of(env: TextArenaEnv) -> tuple[int, ...]:
    return tuple(env._core.state.game_state["secret_code"])


# -- seeds and splits -------------------------------------------------------------------------
def test_a_seed_is_one_game_and_seeds_differ() -> None:
    codes = {}
    for seed in [f"train-{i}" for i in range(12)]:
        one, two = TextArenaEnv(), TextArenaEnv()
        assert one.reset(seed) == two.reset(seed)
        codes[seed] = code_of(one)
        assert code_of(two) == codes[seed]
    assert len(set(codes.values())) > 6


def test_train_and_eval_games_never_meet() -> None:
    env = TextArenaEnv()
    played = {}
    for split, count in (("train", 150), ("eval", 40)):
        played[split] = set()
        for seed in env.seeds(split, count):
            env.reset(seed)
            played[split].add(code_of(env))
    assert not played["train"] & played["eval"]
    assert len(played["eval"]) > 20  # eval seeds are not all one game


def test_seeds_do_not_depend_on_hash_randomization() -> None:
    check_hash_independent(
        "trl_env_textarena:TextArenaEnv", ["train-0", "eval-2", "other"], actions=["[1 2 3 4]"]
    )


def test_other_episodes_do_not_change_a_games_draws() -> None:
    """2048 draws a tile every move: interleaved episodes still replay the same."""

    def play(env: TextArenaEnv, moves: list[str]) -> list[str]:
        return [env.step(m) for m in moves]

    moves = ["[up]", "[left]", "[down]", "[right]"] * 3
    alone = TextArenaEnv(game="2048-v0")
    alone.reset("train-3")
    expected = play(alone, moves)
    one, other = TextArenaEnv(game="2048-v0"), TextArenaEnv(game="2048-v0")
    one.reset("train-3")
    other.reset("train-4")
    seen = []
    for move in moves:
        seen.append(one.step(move))
        other.step(move)
    assert seen == expected


# -- outcomes ---------------------------------------------------------------------------------
def test_a_win_gives_reward_one_and_success() -> None:
    env = TextArenaEnv()
    env.reset("train-0")
    (code,) = env.demonstrate("train-0")
    wrong = "[1 2 3 4]" if code != "[1 2 3 4]" else "[4 3 2 1]"
    reply = env.step(wrong)
    assert "Feedback:" in reply and env.alive and env.reward == 0.0 and not env.success
    reply = env.step(code)
    assert reply.startswith("Game over: You have cracked the code")
    assert not env.alive and env.reward == 1.0 and env.success
    assert "The game is over" in env.step(code) and env.reward == 1.0 and not env.alive


def test_a_second_invalid_move_ends_the_game_with_textarenas_reward() -> None:
    env = TextArenaEnv(game="TowerOfHanoi-v0")
    env.reset("train-0")
    assert "invalid move" in env.step("no move") and env.alive
    reply = env.step("still no move")
    assert "Game over" in reply and not env.alive and not env.success
    assert env.reward == pytest.approx(0.0)  # TextArena scores the pegs placed so far


def test_turn_limit_ends_an_episode_without_an_outcome() -> None:
    env = TextArenaEnv(game="2048-v0", turn_limit=2)
    env.reset("train-0")
    env.step("[up]")
    reply = env.step("[down]")
    assert "Out of turns" in reply and not env.alive and env.reward == 0.0 and not env.success


def test_the_games_own_turn_limit_sets_max_turns() -> None:
    assert TextArenaEnv().max_turns == 40  # Mastermind-v0: 20 turns, one retry each
    assert TextArenaEnv(game="2048-v0").max_turns == 200  # no limit of its own
    assert TextArenaEnv(turn_limit=3).max_turns == 3


# -- demonstrations ---------------------------------------------------------------------------
DEMONSTRATED = [game for game in GAMES if any(game.startswith(p) for p in SOLVERS)]


@pytest.mark.parametrize("game", DEMONSTRATED)
def test_demonstrations_win(game: str) -> None:
    env = TextArenaEnv(game=game)
    for seed in ("train-1", "eval-0"):
        env.reset(seed)
        for action in env.demonstrate(seed):
            assert env.alive
            env.step(action)
        assert not env.alive and env.reward == 1.0 and env.success, (game, seed)


def test_games_without_a_demonstration_have_none() -> None:
    assert TextArenaEnv(game="Sudoku-v0").demonstrate("train-0") is None
    assert TextArenaEnv(game="TowerOfHanoi-v0").demonstrate("train-0")  # 7 moves
    assert TextArenaEnv(game="TowerOfHanoi-v0", turn_limit=6).demonstrate("train-0") is None


# -- prints and data --------------------------------------------------------------------------
def test_textarenas_prints_stay_off_stdout_and_other_threads_still_print(capfd) -> None:
    env = TextArenaEnv(game="RushHour-v0")  # prints its board on reset
    printed = threading.Event()

    def other_thread() -> None:
        print("from the trainer", flush=True)
        printed.set()

    real = env._game.reset

    def reset_while_another_thread_prints(**kwargs):
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
        return real(**kwargs)

    env._game.reset = reset_while_another_thread_prints
    stdout = sys.stdout
    assert env.reset("no-split")  # one game, no search for a split's
    out = capfd.readouterr().out
    assert printed.is_set() and out == "from the trainer\n"
    assert sys.stdout is stdout


def test_a_game_without_its_nltk_data_says_what_to_download(monkeypatch, tmp_path) -> None:
    import nltk

    monkeypatch.setattr(nltk.data, "path", [str(tmp_path)])
    with pytest.raises(MissingDataError) as caught:
        TextArenaEnv(game="Wordle-v0")
    message = str(caught.value)
    assert "python -m nltk.downloader words averaged_perceptron_tagger_eng" in message
    assert message.count(". ") == 0 and message.endswith(".")


def test_a_game_with_its_nltk_data_plays(monkeypatch, tmp_path) -> None:
    """A tiny NLTK ``words`` corpus of our own (the real one cannot be downloaded here)."""
    import nltk

    words = tmp_path / "corpora" / "words"
    words.mkdir(parents=True)
    listed = "\n".join(["planet", "rocket", "garden", "silver", "window"]) + "\n"
    for name in ("en", "en-basic"):
        (words / name).write_text(listed)
    (words / "README").write_text("test corpus\n")
    monkeypatch.setattr(nltk.data, "path", [str(tmp_path)])
    env = TextArenaEnv(game="Hangman-v0")
    assert "You are playing Hangman" in env.reset("train-0")
    for word in listed.split():  # the target is one of them: five guesses, six tries
        if env.alive:
            env.step(f"[{word}]")
    assert not env.alive and env.success and env.reward == 1.0


def test_entry_point_and_prompt() -> None:
    env = load_env("textarena", game="TowerOfHanoi-v0")
    assert isinstance(env, TextArenaEnv) and env.game == "TowerOfHanoi-v0"
    assert "TowerOfHanoi-v0" in env.system_prompt and str(env.max_turns) in env.system_prompt
    assert re.search(r"\[A C\]", env.reset("train-0"))


def test_its_process_wide_lock_makes_it_ask_for_its_own_processes() -> None:
    import tomllib

    from trl_env.config import RolloutConfig
    from trl_env.hosts import host_kind

    metadata = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert metadata["project"]["entry-points"]["trl_env.isolation"] == {"textarena": "process"}
    assert host_kind(RolloutConfig(), TextArenaEnv) == "process"  # auto, the default
    assert host_kind(RolloutConfig(env_isolation="thread"), TextArenaEnv) == "thread"

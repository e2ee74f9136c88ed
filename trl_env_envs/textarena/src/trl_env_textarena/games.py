"""Which TextArena 0.7.4 games trl-env plays, and the data some of them need.

Light on purpose (no ``textarena`` import): ``trl-env list --env textarena`` reads the choices.
The table holds every single-player game id of TextArena 0.7.4 that runs offline on Python 3.11
(its ``-train``/``-raw`` twins differ only in observation wrappers, which trl-env does not use).
``tests/test_textarena_games.py`` checks it against TextArena's own registry.
Left out, and why:

- multi-player games: TextArena 0.7.4 has no built-in opponent that runs offline (its agents
  are LLM API clients, a local Hugging Face model or a human);
- ``GuessWho-v0``, ``TwentyQuestions-v0`` (and ``-hardcore``): the game master is an LLM
  reached through OpenRouter;
- ``Klondike-v0``: its source uses syntax of Python 3.12;
- ``Sokoban-v0-medium``: generating one level took over 20 s (``Sokoban-v0`` is kept).
"""

from __future__ import annotations

DEFAULT_GAME = "Mastermind-v0"

_WORDS = ("words",)
_WORDS_AND_TAGGER = ("words", "averaged_perceptron_tagger_eng")

# Game id -> the NLTK data packages it loads (TextArena downloads them at import, which
# cannot work offline; trl-env asks for them up front instead).
GAMES: dict[str, tuple[str, ...]] = {
    **{
        f"2048-v0{tail}": ()
        for tail in (
            "-ultra-easy",
            "-mega-easy",
            "-super-easy",
            "-very-easy",
            "-easy",
            "",
            "-hard",
            "-very-hard",
            "-extreme",
            "-3x3",
            "-5x5",
            "-6x6",
            "-8x8",
            "-10x10",
        )
    },
    "Bandit-v0": (),
    "Bandit-v0-hard": (),
    "Blackjack-v0": (),
    "Blackjack-v0-long": (),
    "Countdown-v0": (),
    "Crosswords-v0": (),
    "Crosswords-v0-hardcore": (),
    "Cryptarithm-v0": (),
    "FifteenPuzzle-v0": (),
    "FrozenLake-v0": (),
    "FrozenLake-v0-random": (),
    "FrozenLake-v0-hardcore": (),
    "GuessTheNumber-v0": (),
    "GuessTheNumber-v0-hardcore": (),
    "Hangman-v0": _WORDS,
    "Hangman-v0-hardcore": _WORDS,
    "LightsOut-v0": (),
    "LogicPuzzle-v0": (),
    "LogicPuzzle-v0-hard": (),
    "Mastermind-v0": (),
    "Mastermind-v0-hard": (),
    "Mastermind-v0-extreme": (),
    "Minesweeper-v0": (),
    "Minesweeper-v0-small": (),
    "Minesweeper-v0-medium": (),
    "Minesweeper-v0-hard": (),
    "PegJump-v0": (),
    "RushHour-v0": (),
    "Secretary-v0": (),
    "Secretary-v0-long": (),
    "Set-v0": (),
    "Slitherlink-v0": (),
    "Sokoban-v0": (),
    "Sudoku-v0-very-easy": (),
    "Sudoku-v0-easy": (),
    "Sudoku-v0": (),
    "Sudoku-v0-medium": (),
    "Sudoku-v0-hard": (),
    "ThreeCardMonte-v0": (),
    "TowerOfHanoi-v0": (),
    "TowerOfHanoi-v0-medium": (),
    "TowerOfHanoi-v0-hard": (),
    "TowerOfHanoi-v0-hardcore": (),
    "TowerOfHanoi-v0-extreme": (),
    "WordLadder-v0": _WORDS,
    "WordLadder-v0-medium": _WORDS,
    "WordLadder-v0-hard": _WORDS,
    "Wordle-v0": _WORDS_AND_TAGGER,
    "Wordle-v0-hardcore": _WORDS_AND_TAGGER,
    "Wordle-v0-long": _WORDS_AND_TAGGER,
    "Wordle-v0-long-hardcore": _WORDS_AND_TAGGER,
    "WordSearch-v0": _WORDS,
    "WordSearch-v0-hardcore": _WORDS,
}

# Where nltk.data.find looks for each package.
_NLTK_PATHS = {
    "words": "corpora/words",
    "averaged_perceptron_tagger_eng": "taggers/averaged_perceptron_tagger_eng",
}


def missing_data(game: str) -> list[str]:
    """The NLTK data packages ``game`` needs that are not installed (none for most games)."""
    needs = GAMES.get(game, ())
    if not needs:
        return []
    import nltk  # a dependency of textarena

    missing = []
    for package in needs:
        try:
            nltk.data.find(_NLTK_PATHS[package])
        except LookupError:
            missing.append(package)
    return missing

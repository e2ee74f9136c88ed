"""The ``reasoning-gym`` env: one entry of a reasoning-gym dataset per episode.

The first prompt is the entry's question. A reply's answer is read the way reasoning-gym's
own scorers expect it: ``reasoning_gym.utils.extract_answer`` (the text of the last
``<answer>...</answer>``, stripped), then scored by the dataset's ``score_answer`` (1 is right;
some tasks give partial credit). A score below 1 with attempts left gets the score back and
another try; the episode ends at a score of 1 or after ``max_attempts`` replies. ``reward`` is
the score of the last answer, ``success`` whether it was 1. What reasoning-gym prints while
generating or scoring stays off the trainer's stdout (:func:`trl_env.streams.muted`).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
from typing import Any

from trl_env.envkit import EnvKit, Option, OptionError, stable_int
from trl_env.streams import muted

from .tasks import DEFAULT_TASK, NO_CURRICULUM, TASKS, parse_settings

# A question is an eval question when the first byte of its hash is below this (one in five).
EVAL_BYTE_BELOW = 51
# Entries tried per seed to find a question of the seed's split.
SPLIT_TRIES = 200
# Settings the env's own options hold.
OWN_SETTINGS = {"seed": "dataset_seed", "size": "size"}


class ReasoningGymEnv(EnvKit):
    """A reasoning-gym task (default ``basic_arithmetic``), answered in ``<answer>`` tags.

    Not a ``trl_env.tools.AnswerEnv``: its ``task`` attribute is the question being played,
    and here ``task`` is the option naming the dataset; the episode's state is its own too
    (a wrong answer may get another try).
    """

    env_name = "reasoning-gym"
    task = Option(DEFAULT_TASK, "the reasoning-gym dataset to draw questions from", choices=TASKS)
    config = Option(
        "",
        "the task's own settings as key=value pairs separated by ';' "
        "(values are YAML: 'min_terms=2; operators=[+, -]')",
    )
    difficulty = Option(
        None,
        "the task's curriculum level for all its attributes (0 is easiest; capped at each "
        "attribute's last level); none: the task's defaults. config settings win over it",
        type=int,
        min=0,
    )
    size = Option(
        None, "entries in the dataset; none: the task's default (500 for most)", type=int, min=1
    )
    dataset_seed = Option(0, "the dataset's seed: another value, other questions", min=0)
    max_attempts = Option(
        1, "answers per episode: a wrong one gets its score back and another try", min=1
    )

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        try:
            settings = parse_settings(self.config)
        except ValueError as exc:
            raise self.refuse("config", f"key=value pairs separated by ';' ({exc})") from None
        for key, option in OWN_SETTINGS.items():
            if key in settings:
                raise self.refuse("config", f"settings other than {key} (set option {option})")
        if self.difficulty is not None and self.task in NO_CURRICULUM:
            raise self.refuse("difficulty", f"none: {self.task} has no curriculum levels")
        self.dataset = _dataset(self, json.dumps(settings, sort_keys=True))
        self.entry: dict[str, Any] = {}
        self.score: float | None = None
        self.answer: str | None = None
        self.turns = 0

    @property
    def max_turns(self) -> int:
        return self.max_attempts

    # -- optional extras --------------------------------------------------------------------
    @property  # type: ignore[misc]  # EnvKit's can be assigned
    def system_prompt(self) -> str:
        from reasoning_gym.utils import SYSTEM_PROMPTS

        tries = (
            f"\nYou have {self.max_attempts} attempts: a wrong answer gets its score back "
            "and another try."
            if self.max_attempts > 1
            else ""
        )
        return SYSTEM_PROMPTS["default"].rstrip("\n") + tries

    @property
    def success(self) -> bool:
        """The last answer scored 1 (read once the episode is over)."""
        return self.score is not None and self.score >= 1.0

    def demonstrate(self, seed: str) -> list[str] | None:
        """The reply that answers ``seed``'s question with the dataset's own answer; None for
        the tasks that store none (their scorers check an answer's validity)."""
        answer = self.entry_for(str(seed)).get("answer")
        return None if answer is None else [f"<answer>{answer}</answer>"]

    # -- seeds ------------------------------------------------------------------------------
    def entry_for(self, seed: str) -> dict[str, Any]:
        """The dataset entry a seed plays: ``train-*``/``eval-*`` seeds only get questions of
        their split (a hash of the question decides), other seeds any question."""
        want = self.split_of(seed)
        size = len(self.dataset)
        tried: set[int] = set()
        for attempt in range(SPLIT_TRIES):
            index = stable_int(f"reasoning-gym:{self.task}:{seed}:{attempt}") % size
            if index in tried:
                continue
            with muted():  # some generators print (bf's compiler prints dots)
                entry = self.dataset[index]
            if want is None or split_of_question(self.task, entry["question"]) == want:
                return entry
            tried.add(index)
            if len(tried) == size:
                break  # a small dataset (knight_swap holds 5 entries by default)
        raise OptionError(
            f"reasoning-gym's {self.task} with these settings gave no {want} question in "
            f"{len(tried)} of its {size} entries; give it a larger size or more varied settings."
        )

    # -- protocol -----------------------------------------------------------------------------
    def reset(self, seed: str) -> str:
        self.entry = self.entry_for(str(seed))
        self.score, self.answer, self.turns = None, None, 0
        self.reward, self.alive = 0.0, True
        return str(self.entry["question"])

    def step(self, action: str) -> str:
        if not self.entry:
            return "No question yet: call reset(seed) first."
        if not self.alive:
            return "The episode is over; start a new one with reset."
        from reasoning_gym.utils import extract_answer

        action = action if isinstance(action, str) else str(action)
        self.turns += 1
        self.answer = answer = extract_answer(action)
        self.score = self.reward = self._score(answer)
        left = self.max_attempts - self.turns
        if self.score >= 1.0 or left <= 0:
            self.alive = False
            verdict = "Correct." if self.score >= 1.0 else f"Your answer scored {self.score:g}."
            return f"{verdict} The episode is over."
        said = (
            f"Your answer scored {self.score:g} (1 is right)."
            if answer is not None
            else "I found no <answer>...</answer> in your reply."
        )
        return f"{said} Try again: {left} attempt{'s' if left != 1 else ''} left."

    def _score(self, answer: str | None) -> float:
        """The dataset's score of ``answer``; 0 when its scorer fails on it."""
        try:
            with muted():
                score = float(self.dataset.score_answer(answer, self.entry))
        except Exception:  # a scorer that cannot read a reply scores it as wrong
            return 0.0
        return score if math.isfinite(score) else 0.0


def split_of_question(task: str, question: str) -> str:
    digest = hashlib.sha256(f"reasoning-gym:{task}:{question}".encode("utf-8", "replace"))
    return "eval" if digest.digest()[0] < EVAL_BYTE_BELOW else "train"


def _dataset(env: ReasoningGymEnv, settings: str) -> Any:
    """The env's dataset (cached per process), or an OptionError saying which value is wrong."""
    try:
        with muted():
            return _cached_dataset(env.task, settings, env.difficulty, env.size, env.dataset_seed)
    except (AssertionError, TypeError, ValueError) as exc:
        raise env.refuse("config", f"settings {env.task} accepts ({exc})") from None


@functools.lru_cache(maxsize=32)
def _cached_dataset(
    task: str, settings: str, difficulty: int | None, size: int | None, seed: int
) -> Any:
    from reasoning_gym.factory import CURRICULA, DATASETS

    dataset_cls, config_cls = DATASETS[task]
    own = dict(json.loads(settings))
    fields = {f.name for f in dataclasses.fields(config_cls)}
    unknown = sorted(set(own) - fields)
    if unknown:
        known = ", ".join(sorted(fields - set(OWN_SETTINGS)))
        raise ValueError(f"no setting {unknown[0]!r}; its settings are {known}")
    values: dict[str, Any] = {}
    if difficulty is not None:
        curriculum = CURRICULA[task]()
        curriculum.set_global_level(difficulty)
        values = dataclasses.asdict(curriculum.generate_configuration())
    values.update(own, seed=seed)
    if size is not None:
        values["size"] = size
    config = config_cls(**values)
    return dataset_cls(config=config)

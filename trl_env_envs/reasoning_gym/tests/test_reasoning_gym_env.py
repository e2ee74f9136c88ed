"""The reasoning-gym env: conformance, tasks and settings, splits, attempts, demonstrations."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType

import pytest

from trl_env import load_env
from trl_env.envkit import OptionError
from trl_env.testing.env_tests import EnvTests
from trl_env.testing.envs import check_hash_independent
from trl_env_reasoning_gym import TASKS, ReasoningGymEnv, parse_settings
from trl_env_reasoning_gym.tasks import NO_CURRICULUM

SMALL = "min_terms=2; max_terms=2; min_digits=1; max_digits=1; operators=[+]"


class TestReasoningGymKit(EnvTests):
    env = ReasoningGymEnv
    module = "trl_env_reasoning_gym"
    options = (
        {},
        {"task": "chain_sum", "max_attempts": 3},
        {"task": "spell_backward", "difficulty": 0},
        {"difficulty": 99, "config": "max_terms=3", "size": 50, "dataset_seed": 5},
    )
    actions = ("<answer>42</answer>", "<answer>-7</answer>", "I think 3", "<answer></answer>")
    check = MappingProxyType({"episodes": 12, "examples": 20})
    bad_options = (
        ({"task": "no_such_task"}, ValueError),
        ({"task": "composite"}, ValueError),  # its setting is other tasks: a mixture says that
        ({"config": "min_terms=5; max_terms=2"}, ValueError),  # the task's own validation
        ({"config": "no_such_setting=1"}, ValueError),
        ({"config": "seed=3"}, ValueError),  # the option dataset_seed holds it
        ({"config": "max_terms"}, ValueError),
        ({"config": 3}, TypeError),
        ({"max_attempts": 0}, ValueError),
        ({"difficulty": -1}, ValueError),
        ({"task": "gsm_symbolic", "difficulty": 1}, ValueError),  # no curriculum
        ({"size": 0}, ValueError),
    )
    readme = Path(__file__).parents[1] / "README.md"
    readme_seed = "eval-0"
    readme_actions = ("4649 * 8219 = 38210131, so <answer>38210131</answer>",)


def question(seed: str, **options: object) -> str:
    return ReasoningGymEnv(**options).reset(seed)  # type: ignore[arg-type]


# -- tasks and settings ----------------------------------------------------------------------
def test_tasks_are_reasoning_gyms_own_but_composite() -> None:
    from reasoning_gym.factory import CURRICULA, DATASETS

    assert set(TASKS) == set(DATASETS) - {"composite"}
    assert set(TASKS) - set(CURRICULA) == NO_CURRICULUM


@pytest.mark.parametrize(
    ("text", "settings"),
    [
        ("", {}),
        ("max_terms=3", {"max_terms": 3}),
        (" min_terms = 2 ;operators=[+, -]; ", {"min_terms": 2, "operators": ["+", "-"]}),
        (
            "allow_negation=false; format_style=natural",
            {"allow_negation": False, "format_style": "natural"},
        ),
    ],
)
def test_settings_are_key_value_pairs_with_yaml_values(text: str, settings: dict) -> None:
    assert parse_settings(text) == settings


def flow_bomb(levels: int = 9) -> str:
    """One line of flow YAML that expands to 9**levels values through its aliases."""
    parts = ["&a0 [" + ", ".join(["lol"] * 9) + "]"]
    parts += [f"&a{n} [" + ", ".join([f"*a{n - 1}"] * 9) + "]" for n in range(1, levels)]
    return "[" + ", ".join(parts) + "]"


def test_an_alias_bomb_in_one_setting_is_refused_before_it_expands() -> None:
    # a few hundred bytes, within any config file's bounds, and billions of values expanded
    with pytest.raises(ValueError, match="config's operators expands to more than"):
        parse_settings(f"max_terms=3; operators={flow_bomb()}")
    assert parse_settings("operators=[&o [+, -], *o]") == {"operators": [["+", "-"], ["+", "-"]]}


def test_settings_reach_the_dataset() -> None:
    env = ReasoningGymEnv(config=SMALL)
    for i in range(10):
        text = env.reset(f"train-{i}")
        assert text.count("+") == 1 and "*" not in text, text
    assert env.dataset.config.max_terms == 2


def test_difficulty_is_the_curriculum_level_and_settings_win_over_it() -> None:
    easy, hard = ReasoningGymEnv(difficulty=0), ReasoningGymEnv(difficulty=9)
    assert (easy.dataset.config.min_terms, easy.dataset.config.max_terms) == (2, 2)
    assert hard.dataset.config.max_terms == 6  # capped at the attribute's last level
    assert ReasoningGymEnv(difficulty=9, config="max_terms=3").dataset.config.max_terms == 3


def test_a_bad_setting_is_one_sentence_naming_the_settings() -> None:
    with pytest.raises(OptionError) as caught:
        ReasoningGymEnv(config="max_term=3")
    message = str(caught.value)
    assert "no setting 'max_term'" in message and "max_terms" in message
    assert message.endswith(".") and "\n" not in message


# -- seeds and splits -----------------------------------------------------------------------
def test_a_seed_is_one_question_in_every_instance() -> None:
    for seed in ("train-0", "train-7", "eval-3", "another"):
        assert question(seed) == question(seed)
    assert len({question(f"train-{i}") for i in range(10)}) == 10
    assert question("train-0") != question("train-0", dataset_seed=1)


def test_train_and_eval_questions_never_meet_even_in_a_small_task() -> None:
    env = ReasoningGymEnv(config=SMALL, size=2000)
    train = {env.reset(s) for s in env.seeds("train", 300)}
    evals = {env.reset(s) for s in env.seeds("eval", 80)}
    assert not train & evals and len(evals) > 10


def test_a_dataset_too_small_for_a_split_says_so() -> None:
    env = ReasoningGymEnv(config=SMALL, size=3)
    with pytest.raises(OptionError, match="of its 3 entries; give it a larger size"):
        for i in range(20):  # three entries: some split has none of them
            env.reset(f"eval-{i}")
            env.reset(f"train-{i}")


def test_questions_do_not_depend_on_hash_randomization() -> None:
    seeds = ["train-0", "eval-1"]
    actions = ["<answer>3</answer>"]
    check_hash_independent("trl_env_reasoning_gym:ReasoningGymEnv", seeds, actions=actions)


# -- answers and attempts --------------------------------------------------------------------
def test_the_answer_is_read_as_reasoning_gym_reads_it() -> None:
    env = ReasoningGymEnv()
    env.reset("train-1")
    right = env.entry["answer"]
    reply = env.step(f"<answer>0</answer> on second thought <answer> {right} </answer>")
    assert reply == "Correct. The episode is over."
    assert env.answer == right and env.reward == 1.0 and env.success and not env.alive
    assert "over" in env.step(f"<answer>{right}</answer>") and env.reward == 1.0


def test_a_wrong_answer_gets_its_score_and_another_try() -> None:
    env = ReasoningGymEnv(max_attempts=3)
    env.reset("train-1")
    reply = env.step("no tags here")
    assert reply == "I found no <answer>...</answer> in your reply. Try again: 2 attempts left."
    reply = env.step("<answer>not a number</answer>")
    assert reply == "Your answer scored 0 (1 is right). Try again: 1 attempt left."
    assert env.alive and env.reward == 0.0 and not env.success
    env.step("<answer>still wrong</answer>")
    assert not env.alive and env.reward == 0.0 and not env.success and env.turns == 3


def test_reward_is_the_scorers_partial_credit() -> None:
    env = ReasoningGymEnv(task="spell_backward")
    env.reset("train-0")
    right = env.entry["answer"]
    env.step(f"<answer>{right}xx</answer>")  # reasoning-gym's default scorer: a share
    expected = env.dataset.score_answer(f"{right}xx", env.entry)
    assert 0.0 < env.reward == expected < 1.0 and not env.success


def test_max_turns_is_max_attempts_and_the_prompt_says_how_to_answer() -> None:
    env = load_env("reasoning-gym", max_attempts=4)
    assert isinstance(env, ReasoningGymEnv) and env.max_turns == 4
    assert "<answer>" in env.system_prompt and "4 attempts" in env.system_prompt
    assert "attempts" not in ReasoningGymEnv().system_prompt


# -- demonstrations ---------------------------------------------------------------------------
# A spread of categories (arithmetic, algorithmic, logic, games, graphs, cognition, code...);
# tests/sweep_demonstrations.py plays every task (a few minutes).
DEMONSTRATED = (
    "basic_arithmetic", "chain_sum", "gcd", "spell_backward", "word_sorting", "caesar_cipher",
    "family_relationships", "syllogism", "knights_knaves", "mini_sudoku", "tower_of_hanoi",
    "maze", "shortest_path", "number_sequence", "bf", "calendar_arithmetic", "sokoban",
    "complex_arithmetic", "letter_counting", "game_of_life",
)  # fmt: skip


@pytest.mark.parametrize("task", DEMONSTRATED)
def test_demonstrations_score_one(task: str) -> None:
    env = ReasoningGymEnv(task=task)
    for seed in ("train-0", "eval-0"):
        env.reset(seed)
        (reply,) = env.demonstrate(seed)
        env.step(reply)
        assert env.reward == 1.0 and env.success and not env.alive, (task, seed)


def test_tasks_without_a_stored_answer_have_no_demonstration() -> None:
    assert ReasoningGymEnv(task="graph_color").demonstrate("train-0") is None


def test_reasoning_gyms_prints_stay_off_stdout(capfd) -> None:
    import reasoning_gym

    capfd.readouterr()
    reasoning_gym.create_dataset("bf", seed=3, size=5)[0]  # its compiler prints dots
    assert capfd.readouterr().out  # the library itself prints
    env = ReasoningGymEnv(task="bf", dataset_seed=3)
    env.reset("another")
    env.step("<answer>x</answer>")
    print("the trainer's own line")
    assert capfd.readouterr().out == "the trainer's own line\n"

"""The reasoning-gym 0.1.25 tasks trl-env offers, and reading the task settings of ``config``.

Light on purpose (no ``reasoning_gym`` import): ``trl-env list --env reasoning-gym`` reads the
choices. ``tests/test_reasoning_gym_env.py`` checks the list against reasoning-gym's registry.
``composite`` is left out: its setting is a list of other tasks with weights, which a run's
``task`` and a mixture of envs already say.
"""

from __future__ import annotations

from typing import Any

import yaml

from trl_env.errors import UsageError
from trl_env.yamlfile import bounded_yaml

DEFAULT_TASK = "basic_arithmetic"

TASKS: tuple[str, ...] = (
    "ab",
    "acre",
    "advanced_geometry",
    "aiw",
    "arc_1d",
    "arc_agi",
    "base_conversion",
    "basic_arithmetic",
    "bf",
    "binary_alternation",
    "binary_matrix",
    "bitwise_arithmetic",
    "boxnet",
    "caesar_cipher",
    "calendar_arithmetic",
    "chain_sum",
    "circuit_logic",
    "codeio",
    "coin_flip",
    "color_cube_rotation",
    "complex_arithmetic",
    "count_bits",
    "count_primes",
    "countdown",
    "course_schedule",
    "cryptarithm",
    "decimal_arithmetic",
    "decimal_chain_sum",
    "dice",
    "emoji_mystery",
    "family_relationships",
    "figlet_font",
    "fraction_simplification",
    "futoshiki",
    "game_of_life",
    "game_of_life_halting",
    "gcd",
    "graph_color",
    "group_anagrams",
    "gsm_symbolic",
    "intermediate_integration",
    "isomorphic_strings",
    "jugs",
    "kakurasu",
    "knight_swap",
    "knights_knaves",
    "largest_island",
    "lcm",
    "leg_counting",
    "letter_counting",
    "letter_jumble",
    "list_functions",
    "mahjong_puzzle",
    "manipulate_matrix",
    "maze",
    "mini_sudoku",
    "modulo_grid",
    "n_queens",
    "needle_haystack",
    "number_filtering",
    "number_format",
    "number_sequence",
    "number_sorting",
    "palindrome_generation",
    "palindrome_partitioning",
    "path_star",
    "polynomial_equations",
    "polynomial_multiplication",
    "pool_matrix",
    "power_function",
    "prime_factorization",
    "products",
    "propositional_logic",
    "puzzle24",
    "quantum_lock",
    "ransom_note",
    "rearc",
    "rectangle_count",
    "rotate_matrix",
    "rotten_oranges",
    "rubiks_cube",
    "rush_hour",
    "self_reference",
    "sentence_reordering",
    "shortest_path",
    "simple_equations",
    "simple_geometry",
    "simple_integration",
    "sokoban",
    "spell_backward",
    "spiral_matrix",
    "string_insertion",
    "string_manipulation",
    "string_splitting",
    "string_synthesis",
    "sudoku",
    "survo",
    "syllogism",
    "time_intervals",
    "tower_of_hanoi",
    "tsumego",
    "word_ladder",
    "word_sequence_reversal",
    "word_sorting",
    "zebra_puzzles",
)

# Tasks without a curriculum (no ``difficulty`` levels).
NO_CURRICULUM = frozenset({"acre", "gsm_symbolic", "list_functions"})


def parse_settings(text: str) -> dict[str, Any]:
    """``"min_terms=2; operators=[+, -]"`` -> ``{"min_terms": 2, "operators": ["+", "-"]}``.

    Pairs are separated by ``;``, each value is read as YAML (numbers, true/false, lists), so
    the whole fits in one ``--env-arg config=...``. Raises ValueError saying what is wrong.
    """
    settings: dict[str, Any] = {}
    for pair in text.split(";"):
        if not pair.strip():
            continue
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise ValueError(f"expected key=value pairs separated by ';', got {pair.strip()!r}")
        if key in settings:
            raise ValueError(f"{key} is given twice")
        try:  # bounded: an alias bomb fits in one short option value
            settings[key] = bounded_yaml(value, f"config's {key}") if value.strip() else ""
        except yaml.YAMLError:
            settings[key] = value.strip()
        except UsageError as exc:
            raise ValueError(str(exc)) from None
    return settings

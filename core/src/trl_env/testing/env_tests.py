"""The tests every packaged env repeats, as one test class to subclass.

An env's test file states its facts and keeps only its quirks::

    from trl_env.testing.env_tests import EnvTests

    class TestGuessKit(EnvTests):
        env = GuessEnv
        module = "trl_env_guess"
        options = ({}, {"low": 1, "high": 3})
        actions = ("50", "guess: 25", "higher?")
        bad_options = (({"max_turns": 0}, ValueError), ({"low": "1"}, TypeError))

``test_conformance`` runs :func:`~trl_env.testing.envs.check_env` once per entry of ``options``
(an env's ``demonstrate`` must win, except under the ``undemonstrable`` options),
``test_bad_options_are_refused`` once per ``(options, error)`` of ``bad_options``,
``test_import_is_light`` imports ``module`` in a fresh interpreter, and, with ``readme`` set,
``test_readme_sample_episode_is_what_the_env_says`` plays the README's sample episode
(:func:`~trl_env.testing.envs.check_readme_episode`, its lines written by ``readme_first`` and
``readme_reply``). A test that does not apply is dropped with ``test_name = None``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest

from .envs import check_env, check_light_import, check_readme_episode

__all__ = ["EnvTests"]


class EnvTests:
    """Subclass as ``Test...`` and set the env's facts; see the module docstring."""

    env: ClassVar[Callable[..., Any]]
    module: ClassVar[str]
    options: ClassVar[Sequence[Mapping[str, Any]]] = ({},)  # the env made with each, conformance
    actions: ClassVar[Sequence[str]] = ()  # what the random policy plays
    reward_range: ClassVar[tuple[float, float] | None] = (0.0, 1.0)
    check: ClassVar[Mapping[str, Any]] = {}  # more keywords for check_env
    # options under which no player can always win: their demonstrations are not checked
    undemonstrable: ClassVar[Sequence[Mapping[str, Any]]] = ()
    bad_options: ClassVar[Sequence[tuple[Mapping[str, Any], type[Exception]]]] = ()
    readme: ClassVar[Path | None] = None  # a README that shows a sample episode
    readme_seed: ClassVar[str] = ""
    readme_actions: ClassVar[Sequence[str]] = ()
    readme_solved: ClassVar[bool] = True  # the sample episode ends in success

    def readme_first(self, text: str) -> str:
        """The README's line for the first prompt."""
        return f"env:   {text}"

    def readme_reply(self, text: str, env: Any) -> str:
        """The README's line for a reply (``env`` as it is after the step)."""
        return self.readme_first(text)

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if "options" in metafunc.fixturenames:
            metafunc.parametrize("options", self.options)
        if "bad" in metafunc.fixturenames:
            metafunc.parametrize("bad", self.bad_options)

    def test_conformance(self, options: Mapping[str, Any]) -> None:
        env = type(self).env
        check_env(
            lambda: env(**options),
            actions=self.actions,
            reward_range=self.reward_range,
            **{"demonstrations": options not in self.undemonstrable, **self.check},
        )

    def test_bad_options_are_refused(self, bad: tuple[Mapping[str, Any], type[Exception]]) -> None:
        options, error = bad
        with pytest.raises(error):
            type(self).env(**options)

    def test_import_is_light(self) -> None:
        check_light_import(self.module)

    def test_readme_sample_episode_is_what_the_env_says(self) -> None:
        if self.readme is None:
            pytest.skip("no README sample episode given (set readme)")
        env = check_readme_episode(
            self.readme,
            type(self).env(),
            self.readme_seed,
            self.readme_actions,
            self.readme_reply,
            self.readme_first,
        )
        assert env.success is self.readme_solved

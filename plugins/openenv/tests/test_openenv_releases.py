"""What differs between OpenEnv releases and is absorbed by the plugin (openenv 0.10, openenv-core
0.3: `make compat` runs this suite against each)."""

from __future__ import annotations

import importlib.metadata
import inspect

from trl_env_openenv.mapping import observation_text, success_of
from trl_env_openenv.options import Options


def _options(**given: object) -> Options:
    return Options(url="http://127.0.0.1:1", **given)  # type: ignore[arg-type]


def test_an_empty_metadata_field_changes_nothing_the_agent_sees():
    """0.10 servers put the observation's metadata inside it ({} when unset); 0.3 left it out."""
    for old in ({"text": "Go higher."}, {"text": "Go higher.", "tries": 1, "found": False}):
        new = {**old, "metadata": {}}
        assert observation_text(new, _options()) == observation_text(old, _options())
    game = {"text": "Go higher.", "found": True, "metadata": {}}
    assert success_of(game, _options(success_field="found")) is True


def test_metadata_the_env_set_stays_visible_and_addressable():
    observation = {"text": "Go higher.", "metadata": {"won": True}}
    assert '"metadata": {"won": true}' in observation_text(observation, _options())
    assert success_of(observation, _options(success_field="metadata.won")) is True


def test_the_installed_openenv_provides_what_the_plugin_imports():
    from trl_env_openenv import openenv_core

    names = {"openenv", "openenv-core"}
    installed = {}
    for name in names:
        try:
            installed[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    assert installed, "neither openenv nor openenv-core is installed"
    for name in openenv_core.__all__:
        value = getattr(openenv_core, name)
        where = value.__name__ if inspect.ismodule(value) else value.__module__
        assert where.startswith("openenv.core"), (name, where)

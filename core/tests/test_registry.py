"""Resolving environments and processors by name, through real entry-point metadata.

Every distribution here is fake (a dist-info folder on sys.path): nothing is installed.
"""

from __future__ import annotations

import os
import sys

import pytest

import trl_env
from trl_env import discovery, registry
from trl_env.errors import (
    DuplicatePluginError,
    PluginLoadError,
    PluginNotFoundError,
    ProtocolError,
    TrlEnvError,
)
from trl_env.testing.fake_dist import FakeDistributions

BROKEN_IMPORT = "import trl_env_test_missing_dependency\n"
COUNT_ENV_SOURCE = """
class CountEnv:
    reward = 0.0
    alive = False

    def reset(self, seed):
        self.alive = True
        return "Say 1."

    def step(self, action):
        self.alive = False
        return "Over."
"""


def play(env: trl_env.Env, actions: list[str]) -> list[str]:
    texts = [env.reset("train-0")]
    for action in actions:
        texts.append(env.step(action))
    return texts


# -- found by name ---------------------------------------------------------------------------
def test_entry_point_resolves_and_plays(env_dist):
    env_dist("trl-env-counting", "counting")
    env = trl_env.load_env("counting", target=2)
    assert play(env, ["1", "2"]) == ["Say 1.", "Say 2.", "You win."]
    assert env.reward == 1.0 and env.alive is False


def test_processor_gets_the_tokenizer_and_options(processor_dist):
    processor_dist("trl-env-lines", "lines")
    tokenizer = object()
    processor = trl_env.load_processor("lines", tokenizer=tokenizer, prefix=">")
    assert processor.tokenizer is tokenizer
    assert processor.init_system_input("rules") == ">system: rules\n"
    assert processor.parse_agent_output("think\nnorth<end>junk") == ("think", "north")


def test_listing_imports_no_plugin_and_loading_imports_only_the_one_asked_for(env_dist):
    env_dist("trl-env-lazy-a", "lazy-a")
    env_dist("trl-env-lazy-b", "lazy-b")
    infos = {i.name: i for i in registry.envs.infos()}
    assert infos["lazy-a"].distribution == "trl-env-lazy-a"
    assert infos["lazy-a"].value == "fake_trl_env_lazy_a:CountEnv"
    assert "fake_trl_env_lazy_a" not in sys.modules
    assert "fake_trl_env_lazy_b" not in sys.modules
    trl_env.load_env("lazy-a")
    assert "fake_trl_env_lazy_a" in sys.modules
    assert "fake_trl_env_lazy_b" not in sys.modules


def test_env_spec_factory_makes_a_fresh_env_per_call(env_dist):
    env_dist("trl-env-fresh", "fresh")
    make = trl_env.EnvSpec("fresh", options={"target": 1}).factory()
    first, second = make(), make()
    assert first is not second
    assert play(first, ["1"])[-1] == "You win."
    assert second.alive is False  # untouched by the game played on the first


def test_entry_point_into_a_subpackage(fake_distribution):
    fake_distribution(
        "trl-env-nested",
        envs={"nested": "fake_nested.games.count:CountEnv"},
        modules={"fake_nested.games.count": COUNT_ENV_SOURCE},
    )
    assert trl_env.load_env("nested").reset("s") == "Say 1."


def test_fake_modules_are_forgotten_after_cleanup(tmp_path, monkeypatch):
    fakes = FakeDistributions(tmp_path, monkeypatch)
    fakes(
        "trl-env-forget",
        envs={"forget": "fake_forget:CountEnv"},
        modules={"fake_forget": COUNT_ENV_SOURCE},
    )
    trl_env.load_env("forget")
    assert "fake_forget" in sys.modules
    fakes.cleanup()
    assert "fake_forget" not in sys.modules
    assert str(tmp_path) in fakes.pythonpath and fakes.env()["PYTHONPATH"].startswith(str(tmp_path))


def raised(error: type[Exception], name: str, **options: object) -> Exception:
    """The ``error`` that loading env ``name`` raises."""
    with pytest.raises(error) as info:
        trl_env.load_env(name, **options)
    return info.value


# -- unknown names ---------------------------------------------------------------------------
def test_unknown_env_suggests_close_matches_and_lists_the_installed(env_dist):
    env_dist("trl-env-labyrinth", "labyrinth")
    error = raised(PluginNotFoundError, "labyrinht")
    message = str(error)
    assert "Unknown environment 'labyrinht'" in message
    assert "Did you mean 'labyrinth'?" in message
    assert "Installed environments:" in message and "labyrinth" in message
    assert isinstance(error, TrlEnvError) and isinstance(error, LookupError)


@pytest.mark.parametrize("typo", ["labyrinht", "zzzzqqq", "qwen-nope", "llama-not-a-real-size"])
def test_an_unknown_name_never_suggests_a_package_that_may_not_exist(env_dist, typo):
    # A guessed "pip install trl-env-<typo>" would send the user to a package nobody published.
    env_dist("trl-env-labyrinth", "labyrinth")
    for load in (trl_env.load_env, trl_env.load_processor):
        with pytest.raises(PluginNotFoundError) as info:
            load(typo)
        assert "pip install" not in str(info.value)
        assert f"trl-env-{typo}" not in str(info.value)


def test_unknown_name_with_nothing_close_makes_no_suggestion(env_dist):
    env_dist("trl-env-labyrinth", "labyrinth")
    message = str(raised(PluginNotFoundError, "zzzzqqq"))
    assert "Did you mean" not in message
    assert "labyrinth" in message
    assert "install that package" in message


# -- broken plugins --------------------------------------------------------------------------
def test_import_failure_names_distribution_entry_point_and_cause(env_dist):
    env_dist("trl-env-broken", "broken", source=BROKEN_IMPORT)
    error = raised(PluginLoadError, "broken")
    message = str(error)
    assert "distribution trl-env-broken" in message
    assert "trl_env.envs:broken = fake_trl_env_broken:CountEnv" in message
    assert "ModuleNotFoundError" in message and "trl_env_test_missing_dependency" in message
    assert isinstance(error.__cause__, ModuleNotFoundError)


def test_a_broken_plugin_does_not_break_the_others(env_dist):
    env_dist("trl-env-broken", "broken", source="raise RuntimeError('bad plugin')\n")
    env_dist("trl-env-working", "working")
    assert "broken" in registry.envs.names()  # still listed: listing reads metadata only
    with pytest.raises(PluginLoadError, match="RuntimeError: bad plugin"):
        trl_env.load_env("broken")
    assert play(trl_env.load_env("working", target=1), ["1"])[-1] == "You win."


def test_entry_point_to_a_missing_attribute_is_a_load_error(env_dist):
    env_dist("trl-env-typo", "typo", attr="CountEnvv")
    with pytest.raises(PluginLoadError, match="CountEnvv"):
        trl_env.load_env("typo")


def test_factory_that_raises_names_the_env_and_the_cause(env_dist):
    source = "class Boom:\n    def __init__(self):\n        raise RuntimeError('no board')\n"
    env_dist("trl-env-boom", "boom", source=source, attr="Boom")
    message = str(raised(PluginLoadError, "boom"))
    assert "'boom'" in message and "RuntimeError: no board" in message


def test_bad_option_names_the_env_and_the_option(env_dist):
    env_dist("trl-env-opts", "opts")
    message = str(raised(TrlEnvError, "opts", size=9))
    assert "'opts'" in message and "size=9" in message


def test_env_spec_factory_reports_bad_options_as_a_user_error(env_dist):
    # The error must be the registry's, not a TypeError.
    env_dist("trl-env-opts", "opts")
    with pytest.raises(TrlEnvError, match="size"):
        trl_env.EnvSpec("opts", options={"size": 9}).factory()()


# -- duplicates ------------------------------------------------------------------------------
def test_two_distributions_with_one_name_is_an_error_naming_both(env_dist):
    env_dist("trl-env-twin-a", "twin")
    env_dist("trl-env-twin-b", "twin")
    message = str(raised(DuplicatePluginError, "twin"))
    assert "trl-env-twin-a (fake_trl_env_twin_a:CountEnv)" in message
    assert "trl-env-twin-b (fake_trl_env_twin_b:CountEnv)" in message
    assert "'twin'" in message
    assert [i.distribution for i in registry.envs.infos() if i.name == "twin"] == [
        "trl-env-twin-a",
        "trl-env-twin-b",
    ]


def test_a_duplicate_does_not_block_other_names(env_dist):
    env_dist("trl-env-twin-a", "twin")
    env_dist("trl-env-twin-b", "twin")
    env_dist("trl-env-single", "single")
    assert trl_env.load_env("single").reset("s") == "Say 1."


# -- objects that are not an Env / Processor -------------------------------------------------
NO_STEP = """
class NoStep:
    reward = 0.0
    alive = True

    def reset(self, seed):
        return "hi"
"""

STEP_NOT_A_METHOD = """
class StepIsText:
    reward = 0.0
    alive = True
    step = "north"

    def reset(self, seed):
        return "hi"
"""


def test_env_missing_a_method_is_refused_naming_it(env_dist):
    env_dist("trl-env-nostep", "nostep", source=NO_STEP, attr="NoStep")
    message = str(raised(ProtocolError, "nostep"))
    assert "environment 'nostep' returned a NoStep" in message
    assert "it lacks step" in message
    assert "an env needs reset(seed) and step(action)" in message


# -- an env class: what a factory of it may make, registered or not ---------------------------
LATE = """
class Late:
    \"\"\"reward and alive exist only once an episode started: an env all the same.\"\"\"

    def reset(self, seed):
        self.reward, self.alive = 0.0, True
        return "hi"

    def step(self, action):
        self.alive = False
        return "bye"
"""


def test_a_class_accepted_as_a_factory_is_accepted_registered(env_dist):
    """An env whose reward and alive come with reset (read when an episode needs them) is an
    env for the engine as a factory; registered, it is the same env, by the same check."""
    from trl_env.config import RolloutConfig
    from trl_env.hosts.local import ThreadHost

    env_dist("trl-env-late", "late", source=LATE, attr="Late")
    cls = type(trl_env.load_env("late"))
    assert cls.__name__ == "Late"
    for spec in (trl_env.EnvSpec("late"), trl_env.EnvSpec(cls, name="late")):
        env = ThreadHost(spec, RolloutConfig()).open(0, {}).env
        assert type(env) is cls and env.reset("s") == "hi"


def test_env_whose_step_is_not_a_method_is_refused(env_dist):
    env_dist("trl-env-steptext", "steptext", source=STEP_NOT_A_METHOD, attr="StepIsText")
    with pytest.raises(ProtocolError, match="step must be"):
        trl_env.load_env("steptext")


def test_processor_missing_parse_is_refused_naming_it():
    class Half:
        def init_system_input(self, prompt: str) -> str:
            return prompt

        def append_user_input(self, prompt: str) -> str:
            return prompt

    trl_env.register_processor("half", Half)
    with pytest.raises(ProtocolError, match="it lacks parse_agent_output"):
        trl_env.load_processor("half")


def test_entry_point_to_something_not_callable_is_refused(fake_distribution):
    fake_distribution(
        "trl-env-constant",
        envs={"constant": "fake_constant:NAME"},
        modules={"fake_constant": "NAME = 'not a factory'\n"},
    )
    message = str(raised(ProtocolError, "constant"))
    assert "constant = fake_constant:NAME of trl-env-constant is not callable" in message


# -- in-process registration -----------------------------------------------------------------
class Echo:
    """The smallest Env: echoes the action once, then ends."""

    def __init__(self, reward: float = 1.0) -> None:
        self.reward = 0.0
        self.alive = False
        self._win = reward

    def reset(self, seed: str) -> str:
        self.reward, self.alive = 0.0, True
        return f"seed {seed}"

    def step(self, action: str) -> str:
        self.reward, self.alive = self._win, False
        return action


def test_register_env_in_process():
    trl_env.register_env("echo-local", Echo)
    env = trl_env.load_env("echo-local", reward=0.5)
    assert isinstance(env, Echo) and isinstance(env, trl_env.Env)
    assert play(env, ["hello"]) == ["seed train-0", "hello"] and env.reward == 0.5
    info = next(i for i in registry.envs.infos() if i.name == "echo-local")
    assert info.distribution == "(registered in-process)"
    assert info.value.endswith(":Echo")


def test_register_twice_needs_replace():
    trl_env.register_env("echo-twice", Echo)
    with pytest.raises(DuplicatePluginError, match="replace=True"):
        trl_env.register_env("echo-twice", Echo)
    trl_env.register_env("echo-twice", lambda: Echo(reward=2.0), replace=True)
    env = trl_env.load_env("echo-twice")
    play(env, ["x"])
    assert env.reward == 2.0


def test_register_a_non_callable_is_refused():
    with pytest.raises(ProtocolError, match="not callable"):
        trl_env.register_env("echo-bad", Echo())


def test_unregister_forgets_the_name():
    trl_env.register_env("echo-gone", Echo)
    registry.envs.unregister("echo-gone")
    with pytest.raises(PluginNotFoundError):
        trl_env.load_env("echo-gone")


def test_register_processor_in_process():
    class Plain:
        def __init__(self, tokenizer: object = None) -> None:
            self.tokenizer = tokenizer

        def init_system_input(self, prompt: str) -> str:
            return f"[sys]{prompt}"

        def append_user_input(self, prompt: str) -> str:
            return f"[user]{prompt}[agent]"

        def parse_agent_output(self, completion: str) -> tuple[str, str]:
            return "", completion.strip()

    trl_env.register_processor("plain-local", Plain)
    processor = trl_env.load_processor("plain-local", tokenizer="tok")
    assert isinstance(processor, trl_env.Processor) and processor.tokenizer == "tok"
    assert processor.parse_agent_output(" go ") == ("", "go")
    assert "plain-local" in registry.processors.names()


def test_unknown_name_suggests_in_process_names_too():
    trl_env.register_env("echo-local", Echo)
    with pytest.raises(PluginNotFoundError, match="Did you mean 'echo-local'"):
        trl_env.load_env("echo-locl")


# -- bad metadata and TRL_ENV_PLUGINS --------------------------------------------------------
def break_entry_points(dist, text: str) -> None:
    """Overwrite a fake distribution's entry_points.txt with ``text``, as a broken build would."""
    (info,) = dist.path.glob("*.dist-info")
    (info / "entry_points.txt").write_text(text)
    discovery.forget()


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("[trl_env.envs]\nthis line has no equals\n", "line 2 of its entry_points.txt"),
        ("maze = m:M\n[trl_env.envs]\n", "before any [group] header"),
        ("[trl_env.envs]\nmaze = not a module path!\n", "is not 'module:attribute'"),
    ],
)
def test_malformed_metadata_is_one_broken_distribution_and_the_rest_resolve(env_dist, text, reason):
    bad = env_dist("trl-env-malformed", "maze")
    env_dist("trl-env-working", "working")
    break_entry_points(bad, text)
    scan = discovery.scan()
    (broken,) = scan.broken
    assert broken.distribution == "trl-env-malformed" and reason in broken.reason
    assert play(trl_env.load_env("working", target=1), ["1"])[-1] == "You win."
    message = str(raised(PluginNotFoundError, "maze"))
    assert "trl-env-malformed" in message and reason in message


def test_an_unrelated_malformed_distribution_is_ignored(fake_distribution, env_dist):
    # importlib.metadata.entry_points() raises on any malformed file; trl-env must not care.
    other = fake_distribution("someone-elses", entry_points={"console_scripts": {"x": "m:f"}})
    break_entry_points(other, "[console_scripts]\nno equals here\n")
    env_dist("trl-env-working", "working")
    assert discovery.scan().broken == ()
    assert "working" in registry.envs.names()


def test_an_env_module_that_calls_sys_exit_is_a_load_error(env_dist):
    env_dist("trl-env-quitter", "quitter", source="import sys\nsys.exit(0)\n")
    with pytest.raises(PluginLoadError, match=r"trl-env-quitter.*called sys.exit\(0\)"):
        trl_env.load_env("quitter")


@pytest.mark.parametrize("selected", ["trl-env-kept", "kept", "TRL_ENV_KEPT", " kept , nope "])
def test_trl_env_plugins_selects_by_distribution_or_name(env_dist, monkeypatch, selected):
    env_dist("trl-env-kept", "kept")
    env_dist("trl-env-dropped", "dropped")
    monkeypatch.setenv("TRL_ENV_PLUGINS", selected)
    assert trl_env.load_env("kept").reset("s") == "Say 1."
    assert "dropped" not in registry.envs.names()
    message = str(raised(PluginNotFoundError, "dropped"))
    assert "trl-env-dropped has it, but TRL_ENV_PLUGINS leaves it out" in message
    listed = {i.name: i.enabled for i in registry.envs.infos()}
    assert listed["kept"] is True and listed["dropped"] is False


def test_an_empty_trl_env_plugins_loads_no_plugin_but_in_process_names(env_dist, monkeypatch):
    env_dist("trl-env-kept", "kept")
    trl_env.register_env("echo-local", Echo)
    monkeypatch.setenv("TRL_ENV_PLUGINS", "")
    assert registry.envs.names() == ["echo-local"]
    with pytest.raises(PluginNotFoundError, match="leaves it out"):
        trl_env.load_env("kept")


def test_a_distribution_installed_while_running_is_found(tmp_path, monkeypatch):
    # A notebook's `%pip install` adds a dist-info folder to a folder already on sys.path.
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    assert "late" not in registry.envs.names()
    info = site / "trl_env_late-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: trl-env-late\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[trl_env.envs]\nlate = fake_late:CountEnv\n")
    (site / "fake_late.py").write_text(COUNT_ENV_SOURCE)
    os.utime(site, ns=(10**18, 10**18))  # a coarse clock may not have moved since the first scan
    import importlib

    importlib.invalidate_caches()
    assert trl_env.load_env("late").reset("s") == "Say 1."
    sys.modules.pop("fake_late", None)


# -- an env's own isolation, from metadata ---------------------------------------------------
def test_an_env_asks_for_its_isolation_in_metadata_read_without_importing_it(fake_distribution):
    import sys

    from trl_env.config import Isolation, RolloutConfig
    from trl_env.hosts import host_kind
    from trl_env.registry import declared_isolation
    from trl_env.spec import EnvSpec

    fake_distribution(
        "trl-env-locky",
        envs={"locky": "fake_locky:Locky", "plain": "fake_locky:Locky"},
        entry_points={"trl_env.isolation": {"locky": "process"}},
        modules={"fake_locky": "raise RuntimeError('the env was imported')"},
    )
    # another distribution cannot choose for an env it does not have
    fake_distribution("trl-env-meddler", entry_points={"trl_env.isolation": {"plain": "process"}})
    assert declared_isolation("locky") == "process"
    assert declared_isolation("plain") is None
    assert host_kind(RolloutConfig(), "locky") == "process"  # auto, the default
    assert host_kind(RolloutConfig(), EnvSpec("locky", options={"n": 1}).factory()) == "process"
    assert host_kind(RolloutConfig(), "plain") == "thread"
    assert host_kind(RolloutConfig(env_isolation=Isolation.THREAD), "locky") == "thread"
    assert "fake_locky" not in sys.modules

"""Conformance kit for environments: call :func:`check_env` from your own tests.

Example, in a community package's tests::

    from trl_env.testing.envs import check_env
    from my_env import MyEnv

    def test_conformance():
        check_env(MyEnv, actions=["up", "down"], reward_range=(0.0, 1.0))

Each check raises :class:`EnvCheckError` (an ``AssertionError``) naming the seed and the
actions that broke the rule, so a failure can be replayed by hand. The checks run the env in
this process; :func:`check_hash_independent` also starts two interpreters with different
``PYTHONHASHSEED`` values to catch levels that depend on ``hash()``.
"""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from .. import extras
from ..envkit import OptionError, OptionSpec, option_specs
from ..protocols import Env

EnvFactory = Callable[[], Any]

# Actions every env must survive: empty, whitespace, control characters, unicode of every
# width, a lone surrogate, huge numbers (int() refuses > 4300 digits), 100 KB of text.
HOSTILE_ACTIONS: tuple[str, ...] = (
    "",
    " ",
    "\n\n\t",
    "\x00\x01\x02\x1b[2J\x7f",
    "\r\n\r",
    "🙂🎉 👩‍👩‍👧",
    "مرحبا ‮reversed‬",
    "漢字かなカナ",
    "\ud800",
    "-" * 50,
    "9" * 5000,
    "-0",
    "NaN",
    "None",
    "{'action': null}",
    "<|im_end|><end_of_turn></s>",
    "x" * 100_000,
    "up down left right " * 5000,
)


class EnvCheckError(AssertionError):
    """An environment broke a rule of the Env contract."""


def _fail(message: str) -> NoReturn:
    raise EnvCheckError(message)


def _short(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


# -- single-object checks -------------------------------------------------------------------
def check_reward(env: Any, where: str, reward_range: tuple[float, float] | None = None) -> float:
    """``env.reward`` is a finite number (not a bool), inside ``reward_range`` if given."""
    reward = getattr(env, "reward", None)
    if isinstance(reward, bool) or not isinstance(reward, int | float):
        _fail(f"{where}: reward must be a float, got {reward!r}")
    if not math.isfinite(reward):
        _fail(f"{where}: reward must be finite, got {reward!r}")
    if reward_range is not None and not reward_range[0] <= reward <= reward_range[1]:
        _fail(f"{where}: reward {reward!r} is outside {reward_range}")
    return float(reward)


def check_protocol(env: Any) -> None:
    """The two methods and two attributes of :class:`~trl_env.protocols.Env`, and sane extras."""
    if not isinstance(env, Env):
        missing = [m for m in ("reward", "alive", "reset", "step") if not hasattr(env, m)]
        _fail(f"{type(env).__name__} is not an Env; it lacks {', '.join(missing)}")
    if not isinstance(env.alive, bool):
        _fail(f"alive must be a bool, got {env.alive!r}")
    check_reward(env, "before reset")
    if hasattr(env, "system_prompt"):
        prompt = env.system_prompt
        prompt = prompt() if callable(prompt) else prompt
        if not isinstance(prompt, str) or not prompt:
            _fail("system_prompt is present but is not a non-empty string")
    if hasattr(env, "max_turns"):
        turns = env.max_turns
        if isinstance(turns, bool) or not isinstance(turns, int) or turns < 1:
            _fail(f"max_turns must be a positive int, got {turns!r}")
    if hasattr(env, "close") and not callable(env.close):
        _fail("close must be a method")


def check_seeds(factory: EnvFactory, count: int = 16) -> dict[str, list[str]]:
    """Seeds are strings, unique, deterministic across instances, and train/eval disjoint."""
    first, second = factory(), factory()
    out: dict[str, list[str]] = {}
    for split in extras.SPLITS:
        got = extras.seeds(first, split, count)
        if got != extras.seeds(second, split, count) or got != extras.seeds(first, split, count):
            _fail(f"seeds({split!r}, {count}) differs between calls or instances")
        if len(set(got)) != count:
            _fail(f"seeds({split!r}, {count}) repeats a seed: {got}")
        out[split] = got
    shared = set(out["train"]) & set(out["eval"])
    if shared:
        _fail(f"train and eval seeds overlap: {sorted(shared)[:5]}")
    for env in (first, second):
        extras.close(env)
    return out


# -- options ------------------------------------------------------------------------------------
def _refused_value(spec: OptionSpec) -> object:
    """A value ``spec`` must refuse: the wrong type, or a string outside its choices."""
    if spec.type.startswith("str"):
        return "<not one of the choices>" if spec.choices else 12345
    return "not a value of type " + spec.type


def _expect_refusal(
    factory: Callable[..., Any], name: str, value: object, shows_value: bool = True
) -> None:
    try:
        env = factory(**{name: value})
    except OptionError as exc:
        message = str(exc)
        if name not in message or (shows_value and repr(value) not in message):
            _fail(f"refusing {name}={value!r}, the message must name it: {message!r}")
        if "\n" in message or not message.endswith("."):
            _fail(f"refusing {name}={value!r} must take one sentence, not {message!r}")
        return
    except Exception as exc:
        _fail(f"{name}={value!r} raised {type(exc).__name__} instead of OptionError: {exc}")
    extras.close(env)
    _fail(f"option {name} accepted {value!r}")


def check_options(factory: Callable[..., Any]) -> list[OptionSpec]:
    """An env-kit class's declared options hold (other factories have none to check).

    Built with no options, the env has each declared default; each default is accepted when
    given; a value of the wrong type (or outside the choices) and an unknown option name are
    refused with an :class:`~trl_env.envkit.OptionError` of one sentence naming the option and
    the value. Returns the options checked.
    """
    specs = option_specs(factory)
    if not specs:
        return specs
    env = factory()
    for spec in specs:
        if getattr(env, spec.name, None) != spec.default:
            _fail(
                f"option {spec.name} defaults to {spec.default!r}, but the env holds "
                f"{getattr(env, spec.name, None)!r}"
            )
    extras.close(env)
    for spec in specs:
        extras.close(factory(**{spec.name: spec.default}))
        _expect_refusal(factory, spec.name, _refused_value(spec))
    _expect_refusal(factory, "no_such_option", 1, shows_value=False)
    return specs


# -- episode checks --------------------------------------------------------------------------
def _play(factory: EnvFactory, seed: str, actions: Sequence[str]) -> list[tuple[str, float, bool]]:
    """Reset with ``seed``, play ``actions`` (even after the end); each step's text and state."""
    env = factory()
    trace = [(env.reset(seed), check_reward(env, f"reset({seed!r})"), bool(env.alive))]
    for action in actions:
        text = env.step(action)
        trace.append((text, check_reward(env, f"seed {seed!r}, {_short(action)}"), env.alive))
    extras.close(env)
    return trace


def check_reset(factory: EnvFactory, seeds: Sequence[str]) -> None:
    """``reset(seed)`` returns the same non-empty text twice, on one instance and on two."""
    for seed in seeds:
        env, other = factory(), factory()
        text = env.reset(seed)
        if not isinstance(text, str) or not text:
            _fail(f"reset({seed!r}) must return non-empty text, got {_short(str(text))}")
        if not env.alive:
            _fail(f"reset({seed!r}) left alive False; an episode starts alive")
        check_reward(env, f"after reset({seed!r})")
        if env.reset(seed) != text:
            _fail(f"reset({seed!r}) twice on one instance gave different text")
        if other.reset(seed) != text:
            _fail(f"reset({seed!r}) on two instances gave different text")
        for e in (env, other):
            extras.close(e)


def check_replay(factory: EnvFactory, seeds: Sequence[str], actions: Sequence[str]) -> None:
    """The same seed and actions give the same texts, rewards and ``alive`` flags."""
    if not actions:
        return
    for seed in seeds:
        script = [actions[i % len(actions)] for i in range(2 * len(actions))]
        if _play(factory, seed, script) != _play(factory, seed, script):
            _fail(f"seed {seed!r} with actions {script[:6]}... is not deterministic")


def check_episode(
    env: Any,
    seed: str,
    policy: Callable[[int], str],
    max_steps: int,
    reward_range: tuple[float, float] | None = None,
    after_end: int = 3,
) -> list[str]:
    """Play one episode with ``policy(step_index)``; it must end within ``max_steps`` steps.

    Every step returns text and leaves a valid reward; once ``alive`` is False, further steps
    still return text, keep ``alive`` False and leave the reward unchanged. Returns the actions.
    """
    env.reset(seed)
    played: list[str] = []
    while env.alive:
        if len(played) >= max_steps:
            _fail(
                f"seed {seed!r}: still alive after {max_steps} steps "
                f"(last actions {[_short(a, 20) for a in played[-5:]]})"
            )
        action = policy(len(played))
        played.append(action)
        where = f"seed {seed!r}, step {len(played)} ({_short(action)})"
        _step(env, action, where)
        if not isinstance(env.alive, bool):
            _fail(f"{where}: alive must be a bool, got {env.alive!r}")
        check_reward(env, where, reward_range)
    final = env.reward
    for i in range(after_end):
        action = policy(len(played) + i)
        try:
            text = env.step(action)
        except Exception as exc:
            _fail(f"seed {seed!r}: step after the end raised {type(exc).__name__}: {exc}")
        if not isinstance(text, str) or not text:
            _fail(f"seed {seed!r}: a step after the end must return a message, got {text!r}")
        if env.alive:
            _fail(f"seed {seed!r}: a step after the end made the episode alive again")
        if env.reward != final:
            _fail(f"seed {seed!r}: a step after the end changed reward {final} -> {env.reward}")
    return played


def _step(env: Any, action: str, where: str) -> str:
    """``env.step(action)``, which must return text and not raise."""
    try:
        text = env.step(action)
    except Exception as exc:
        _fail(f"{where}: step raised {type(exc).__name__}: {exc}")
    if not isinstance(text, str):
        _fail(f"{where}: step must return str, got {type(text).__name__}")
    return text


def random_policy(actions: Sequence[str], rng: random.Random) -> Callable[[int], str]:
    """Mostly the given actions (sometimes two joined), sometimes junk or hostile text."""
    junk_chars = "abcxyz 0123456789-.,!?\n\t\x00é漢🙂"

    def policy(_: int) -> str:
        roll = rng.random()
        if actions and roll < 0.6:
            return rng.choice(actions)
        if actions and roll < 0.75:
            return f"{rng.choice(actions)} {rng.choice(actions)}"
        if roll < 0.95:
            return "".join(rng.choice(junk_chars) for _ in range(rng.randrange(0, 30)))
        return rng.choice(HOSTILE_ACTIONS[:12])

    return policy


def check_random_policy(
    factory: EnvFactory,
    seeds: Sequence[str],
    actions: Sequence[str] = (),
    episodes: int = 20,
    max_steps: int | None = None,
    reward_range: tuple[float, float] | None = None,
    rng_seed: int = 0,
) -> None:
    """``episodes`` random-policy episodes over ``seeds`` all end within the step limit.

    The limit is ``max_steps``, else the env's ``max_turns``; an env with neither fails.
    """
    rng = random.Random(rng_seed)
    for i in range(episodes):
        env = factory()
        limit = max_steps or extras.max_turns(env, 0)
        if limit <= 0:
            _fail("the env has no max_turns; pass max_steps to check that episodes end")
        check_episode(env, seeds[i % len(seeds)], random_policy(actions, rng), limit, reward_range)
        extras.close(env)


def check_hostile_actions(
    factory: EnvFactory,
    seed: str,
    reward_range: tuple[float, float] | None = None,
    examples: int = 30,
    max_steps: int | None = None,
) -> None:
    """:data:`HOSTILE_ACTIONS` and (with hypothesis installed) random text never raise.

    Each hostile action is repeated until the episode ends, which must happen within
    ``max_steps`` (default: the env's ``max_turns``, else 50).
    """
    for action in HOSTILE_ACTIONS:
        env = factory()
        limit = max_steps or extras.max_turns(env, 50)
        check_episode(env, seed, _constant(action), limit, reward_range)
        extras.close(env)
    if examples <= 0:
        return
    try:
        from hypothesis import HealthCheck, given, settings
        from hypothesis import strategies as st
    except ImportError:  # hypothesis is a test extra; fall back to seeded random text
        rng = random.Random(seed)
        for _ in range(examples):
            texts = ["".join(chr(rng.randrange(0, 0x2FFFF)) for _ in range(rng.randrange(40)))]
            _survive(factory, seed, texts, reward_range)
        return

    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.lists(st.text(max_size=60), min_size=1, max_size=4))
    def run(texts: list[str]) -> None:
        _survive(factory, seed, texts, reward_range)

    run()


def _constant(action: str) -> Callable[[int], str]:
    return lambda _: action


def _survive(
    factory: EnvFactory,
    seed: str,
    texts: Sequence[str],
    reward_range: tuple[float, float] | None,
) -> None:
    env = factory()
    env.reset(seed)
    for text in texts:
        was_alive, before = env.alive, env.reward
        where = f"seed {seed!r}, action {_short(text)}"
        _step(env, text, where)
        check_reward(env, where, reward_range)
        if not was_alive and (env.alive or env.reward != before):
            _fail(f"{where}: a step after the end changed alive or reward")
    extras.close(env)


def check_hash_independent(
    target: str,
    seeds: Sequence[str],
    actions: Sequence[str] = (),
    kwargs: dict[str, Any] | None = None,
) -> None:
    """Episodes of ``module:factory`` agree under two different ``PYTHONHASHSEED`` values.

    Each seed is reset and then played with ``actions``; the texts and rewards must match.
    Catches environments whose levels depend on ``hash()`` or on set iteration order.
    Starts two interpreters (about a second).
    """
    script = (
        "import importlib, json, sys\n"
        "mod, attr = sys.argv[1].split(':')\n"
        "factory = getattr(importlib.import_module(mod), attr)\n"
        "kwargs, seeds, actions = (json.loads(a) for a in sys.argv[2:5])\n"
        "out = []\n"
        "for seed in seeds:\n"
        "    env = factory(**kwargs)\n"
        "    out.append([env.reset(seed)] + [[env.step(a), env.reward] for a in actions])\n"
        "print(json.dumps(out))\n"
    )
    args = [json.dumps(x) for x in (kwargs or {}, list(seeds), list(actions))]
    check_same_output_under_hash_seeds(script, target, *args, what=f"{target}: episodes")


def check_same_output_under_hash_seeds(script: str, *args: str, what: str = "the output") -> str:
    """``python -c script *args`` prints the same under two ``PYTHONHASHSEED`` values; returns it.

    For what an env draws from without being an env (a problem set): catches ``hash()`` and set
    iteration order in it. Starts two interpreters.
    """
    outputs = []
    for hash_seed in ("1", "2"):
        proc = subprocess.run(
            [sys.executable, "-c", script, *args],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": hash_seed},
            timeout=120,
            check=False,
        )
        if proc.returncode != 0:
            _fail(f"{what}: the subprocess failed:\n{proc.stderr[-2000:]}")
        outputs.append(proc.stdout)
    if outputs[0] != outputs[1]:
        _fail(f"{what} depend on PYTHONHASHSEED (Python's hash randomization)")
    return outputs[0]


def check_answer_decides_success(env: Any, seed: str, right: object) -> None:
    """A task env (``env.task.answer``, ``<answer>`` tags) playing ``seed``: answering ``right``
    ends the episode with success and reward 1.0; replayed, a wrong number ends it without."""
    env.step(f"<answer>{right}</answer>")
    if not (env.success is True and env.reward == 1.0 and not env.alive):
        _fail(f"{seed}: the right answer gave success {env.success!r}, reward {env.reward!r}")
    env.reset(seed)
    if env.task is None:
        _fail(f"{seed}: reset left no task")
    env.step(f"<answer>{2 * env.task.answer + 1}</answer>")
    if not (env.success is False and not env.alive):
        _fail(f"{seed}: a wrong answer gave success {env.success!r}, alive {env.alive!r}")


def check_light_import(
    module: str, forbidden: Sequence[str] = ("torch", "transformers", "trl")
) -> None:
    """Importing ``module`` in a fresh interpreter loads none of ``forbidden``.

    Environments run in rollout workers and in ``trl-env play``; they should not pay for (or
    require) the training stack.
    """
    script = (
        "import importlib, json, sys\n"
        "importlib.import_module(sys.argv[1])\n"
        "print(json.dumps([m for m in json.loads(sys.argv[2]) if m in sys.modules]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, module, json.dumps(list(forbidden))],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if proc.returncode != 0:
        _fail(f"importing {module} failed:\n{proc.stderr[-2000:]}")
    loaded = json.loads(proc.stdout)
    if loaded:
        _fail(f"importing {module} also imports {', '.join(loaded)}")


def check_readme_episode(
    readme: str | os.PathLike[str],
    env: Any,
    seed: str,
    actions: Sequence[str],
    reply_line: Callable[[str, Any], str],
    reset_line: Callable[[str], str] | None = None,
) -> Any:
    """The sample episode a README shows is what ``env`` says; returns the env, played.

    The README holds ``reset_line(first_text)``, then for each action ``agent: ACTION`` and
    ``reply_line(reply, env)``, one after another: the two write the package's layout
    (``reset_line`` defaults to ``reply_line`` before any step).
    """
    from pathlib import Path

    text = Path(readme).read_text(encoding="utf-8")
    first = env.reset(seed)
    lines = [reset_line(first) if reset_line else reply_line(first, env)]
    for action in actions:
        reply = _step(env, action, f"seed {seed!r}, action {_short(action)}")
        lines += [f"agent: {action}", reply_line(reply, env)]
    episode = "\n".join(lines)
    if episode not in text:
        _fail(f"{readme} does not show the episode the env plays now:\n{episode}")
    return env


def check_demonstrations(
    factory: EnvFactory, seeds: Sequence[str], best: float | None = None
) -> int:
    """When the env has ``demonstrate``: for each seed it returns the same non-empty list of
    actions twice, and those actions replayed through ``reset``/``step`` end the episode with
    ``success`` True (when the env has ``success``) and reward ``best`` (when given). Returns
    how many seeds were checked (0 for an env without the extra)."""
    env = factory()
    if extras.demonstrate(env, str(seeds[0]) if seeds else "train-0") is None:
        extras.close(env)
        return 0
    for seed in seeds:
        try:
            actions = extras.demonstrate(env, seed)
        except Exception as exc:
            _fail(f"demonstrate({seed!r}) raised {type(exc).__name__}: {exc}")
        if not actions:
            _fail(f"demonstrate({seed!r}) returned no actions")
        if extras.demonstrate(factory(), seed) != actions:
            _fail(f"demonstrate({seed!r}) differs between calls")
        env.reset(seed)
        for n, action in enumerate(actions, 1):
            if not env.alive:
                _fail(f"demonstrate({seed!r}): the episode ended after {n - 1} of its actions")
            _step(env, action, f"seed {seed!r}, demonstrated step {n} ({_short(action)})")
        if env.alive:
            _fail(f"demonstrate({seed!r}): the episode is still alive after its actions")
        won = extras.success(getattr(env, "success", None))
        if hasattr(env, "success") and won is not True:
            _fail(f"demonstrate({seed!r}): replayed, success is {won!r}, not True")
        reward = check_reward(env, f"demonstrate({seed!r}) replayed")
        if best is not None and reward != best:
            _fail(f"demonstrate({seed!r}): replayed, reward {reward!r} is not the best, {best!r}")
    extras.close(env)
    return len(seeds)


# -- everything ---------------------------------------------------------------------------------
def check_env(
    factory: EnvFactory,
    *,
    seeds: Sequence[str] | None = None,
    actions: Sequence[str] = (),
    episodes: int = 20,
    max_steps: int | None = None,
    reward_range: tuple[float, float] | None = None,
    examples: int = 30,
    demonstrations: bool = True,
) -> None:
    """Run every check on the environments ``factory()`` makes (and its options, for a kit class).

    ``seeds`` default to the env's own first train and eval seeds; ``actions`` are well-formed
    actions the random policy mixes with junk; ``max_steps`` defaults to the env's
    ``max_turns``; ``reward_range`` (e.g. ``(0.0, 1.0)``) bounds every reward seen;
    ``examples`` is the number of hypothesis-generated action lists. An env with
    ``demonstrate`` must win every seed with it, at the top of ``reward_range`` when given
    (``demonstrations=False``: options under which no player can always win).
    """
    env = factory()
    check_protocol(env)
    extras.close(env)
    check_options(factory)
    split_seeds = check_seeds(factory)
    if seeds is None:
        seeds = split_seeds["train"][:3] + split_seeds["eval"][:2]
    if not seeds:
        _fail("check_env needs at least one seed")
    check_reset(factory, seeds)
    check_replay(factory, seeds, actions)
    check_random_policy(
        factory, seeds, actions, episodes=episodes, max_steps=max_steps, reward_range=reward_range
    )
    check_hostile_actions(
        factory, seeds[0], reward_range=reward_range, examples=examples, max_steps=max_steps
    )
    if demonstrations:
        check_demonstrations(factory, seeds, reward_range[1] if reward_range else None)

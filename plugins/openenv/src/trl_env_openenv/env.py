"""``OpenEnvEnv``: a running OpenEnv environment server as a trl-env ``Env``."""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any

from .errors import ConnectionLostError, OpenEnvOptionError
from .mapping import (
    InvalidAction,
    action_payload,
    observation_text,
    reset_kwargs,
    success_of,
)
from .options import Options
from .release import close_in_background

if TYPE_CHECKING:
    from .session import Session

_PROMPTS = {
    "field": (
        "You act in an environment. Each reply you write is sent to it as the action's "
        "`{field}` field, and its answer comes back as the next message."
    ),
    "json": (
        "You act in an environment. Reply with one JSON object: the action to take. "
        "Its answer comes back as the next message."
    ),
    "auto": (
        "You act in an environment. Reply with your action as text (sent as its `{field}` "
        "field) or as one JSON object giving the whole action. Its answer comes back as the "
        "next message."
    ),
}


# How long close() waits for a session with no call in flight to close before leaving the rest to
# the background thread: a healthy server answers in milliseconds, a stuck one never.
CLOSE_WAIT_SECONDS = 2.0


class _Held:
    """The env's session, in an object the abandonment finalizer can hold without the env."""

    session: Session | None = None


def _abandoned(held: _Held) -> None:
    if held.session is not None:
        session, held.session = held.session, None
        close_in_background(session, "the env was dropped without close() (abandoned episode)")


class OpenEnvEnv:
    """The ``openenv`` environment: one episode is one session with an OpenEnv server.

    ``reset(seed)`` opens a WebSocket session (retrying a server that is down, busy or starting)
    and resets the server's environment with the seed; ``step(action)`` sends the reply as an
    action. ``reward`` and ``alive`` follow the server's ``reward`` and ``done``.

    Failures raise a :class:`~trl_env_openenv.errors.OpenEnvError` (a ``TrlEnvError``) with one
    readable sentence; a server that dies mid-episode makes ``step`` raise
    :class:`~trl_env_openenv.errors.ConnectionLostError` and sets ``alive`` to False, so the
    rollout engine ends that episode with status ``error`` and the batch goes on. An action the
    agent wrote badly (not JSON in ``json`` mode, refused by the server's action schema) is not a
    failure: the agent reads why and the episode goes on.

    Sessions are always given back: ``close()`` is quick and safe from any thread, also while a
    ``step`` is stuck on another (the engine's timeout does that); the session is then closed
    in the background and the reason logged, as is the session of an env dropped without
    ``close()``. A full server is waited for inside ``reset`` (``slot_timeout``, a budget of its
    own); :attr:`slot_wait_seconds` says how long.
    """

    def __init__(
        self,
        *,
        url: str,
        action_field: str = "message",
        action_format: str = "field",
        action_defaults: dict[str, Any] | str | None = None,
        observation_field: str | None = None,
        success_field: str | None = None,
        seed_mode: str = "int",
        seed_key: str = "seed",
        reset_args: dict[str, Any] | str | None = None,
        reward_mode: str = "sum",
        timeout: float = 60.0,
        connect_timeout: float = 10.0,
        retries: int = 4,
        backoff: float = 0.5,
        slot_timeout: float = 300.0,
        max_reply_mb: float = 4.0,
        token_env: str | None = None,
        system_prompt: str | None = None,
        max_turns: int | None = None,
    ) -> None:
        self.options = Options.parse(
            url=url,
            action_field=action_field,
            action_format=action_format,
            action_defaults=action_defaults,
            observation_field=observation_field,
            success_field=success_field,
            seed_mode=seed_mode,
            seed_key=seed_key,
            reset_args=reset_args,
            reward_mode=reward_mode,
            timeout=timeout,
            connect_timeout=connect_timeout,
            retries=retries,
            backoff=backoff,
            slot_timeout=slot_timeout,
            max_reply_mb=max_reply_mb,
            token_env=token_env,
        )
        self.system_prompt = system_prompt or _PROMPTS[self.options.action_format].format(
            field=self.options.action_field
        )
        self.max_turns = _max_turns(max_turns)
        self.reward = 0.0
        self.alive = False
        self._steps = 0
        self._observation: dict[str, Any] | None = None  # the last one, for success
        # How long the last reset waited for a free slot on a full server: not env time.
        self.slot_wait_seconds = 0.0
        # The engine lets reset run this long, not just a step's timeout: it may wait for a slot.
        self.reset_timeout = self.options.slot_timeout + self.options.timeout
        # Opened on the first reset: creating an env (the CLI does it once to check the options)
        # costs no connection, and importing openenv-core waits until it is needed.
        self._held = _Held()
        self._lock = threading.Lock()
        self._running = ""  # the call in flight ("reset", "step 3"), for close()'s log line
        self._finalizer = weakref.finalize(self, _abandoned, self._held)
        # At exit the OS closes the socket and the server frees the slot; no thread may start then.
        self._finalizer.atexit = False

    @property
    def url(self) -> str:
        return self.options.url

    @property
    def _session(self) -> Session | None:
        return self._held.session

    @property
    def connection_attempts(self) -> int:
        """Connection attempts made so far, retries included (for logs and tests)."""
        session = self._session
        return 0 if session is None else session.attempts

    @property
    def observation(self) -> dict[str, Any] | None:
        """The server's last observation (without reward and done), as it sent it."""
        return self._observation

    @property
    def success(self) -> bool | None:
        """``success_field`` of the last observation; None (not reported) without that option.

        OpenEnv's protocol carries no success flag of its own, so by default this env does
        not say, and trl-env records ``success: null``.
        """
        return success_of(self._observation, self.options)

    def reset(self, seed: str) -> str:
        self.reward = 0.0
        self.alive = False
        self._steps = 0
        self._observation = None
        session = self._open()
        self._running = "reset"
        try:
            result = session.reset(reset_kwargs(str(seed), self.options))
        finally:
            self._running = ""
            self.slot_wait_seconds = session.slot_wait_seconds
        self.reward = result.reward or 0.0
        self.alive = not result.done
        self._observation = result.observation
        return observation_text(result.observation, self.options)

    def step(self, action: str) -> str:
        if not self.alive:
            # Trainers may step a finished episode; reply, and leave reward and alive as they are.
            return "The episode is over."
        from .session import ActionRejected

        try:
            payload = action_payload(action, self.options)
        except InvalidAction as exc:
            return f"Invalid action: {exc}."
        self._steps += 1
        session = self._session
        if session is None:
            self.alive = False
            raise ConnectionLostError(
                f"The session with the OpenEnv server at {self.url} was closed before step "
                f"{self._steps}."
            )
        self._running = f"step {self._steps}"
        try:
            result = session.step(payload, self._steps)
        except ActionRejected as exc:
            return f"The environment rejected the action: {exc}."
        except Exception:
            self.alive = False
            raise
        finally:
            self._running = ""
        reward = result.reward or 0.0
        self.reward = self.reward + reward if self.options.reward_mode == "sum" else reward
        self.alive = not result.done
        self._observation = result.observation
        return observation_text(result.observation, self.options)

    def close(self) -> None:
        """Give the session back; the server frees its slot. Quick, from any thread, twice too.

        With a call in flight (a step the engine timed out), the call fails at once and the
        session closes in the background, the reason logged; otherwise close waits up to
        ``CLOSE_WAIT_SECONDS`` for it.
        """
        self.alive = False
        with self._lock:
            session, self._held.session = self._held.session, None
        if session is None:
            return
        running = self._running
        if running:
            reason = f"{running} was still running when the episode was closed (a timeout?)"
            close_in_background(session, reason)
        else:
            close_in_background(session, "").join(CLOSE_WAIT_SECONDS)

    def _open(self) -> Session:
        from .session import Session  # imports openenv-core (seconds), on first use only

        with self._lock:
            if self._held.session is None:
                self._held.session = Session(self.options)
            return self._held.session

    def __repr__(self) -> str:
        return f"OpenEnvEnv(url={self.options.url!r})"


def _max_turns(value: Any) -> int | None:
    if value is None or value == "":
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise OpenEnvOptionError(f"Option max_turns must be a whole number >= 1, not {value!r}.")
    return value

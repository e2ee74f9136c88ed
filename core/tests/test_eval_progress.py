"""`trl-env eval`'s progress: turns counted per generation call, the rest of the backend as is."""

from __future__ import annotations

from typing import Any

from trl_env.cli.eval_cmd import _progress
from trl_env.evaluation import _Counted


class Session:
    def __init__(self) -> None:
        self.closed = False

    def generate(self, turns: list[int], *rest: Any) -> list[str]:
        return [f"sample {t}" for t in turns]

    def close(self) -> None:
        self.closed = True


class Backend:
    name = "fake"

    def session(self, params: Any) -> Session:
        return Session()


def test_turns_are_counted_and_everything_else_passes_through() -> None:
    with _progress(total=4, quiet=True) as bar:
        backend = _Counted(Backend(), bar.turns)
        session = backend.session(None)
        assert session.generate([0, 1, 2]) == ["sample 0", "sample 1", "sample 2"]
        session.generate([3])
        session.close()
        assert bar.played == 4 and backend.name == "fake"
        assert session._session.closed
        assert getattr(session, "streams", None) is None  # optional extras stay optional


def test_the_bar_shows_turns_and_episodes() -> None:
    with _progress(total=2, quiet=False) as bar:
        bar.turns(3)
        bar.episode()
        task = bar.bar.tasks[0]
        assert task.completed == 1 and task.fields["turns"] == 3

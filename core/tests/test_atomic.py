"""A directory built with ``atomic.building`` appears whole or not at all."""

from __future__ import annotations

from pathlib import Path

import pytest

from trl_env.atomic import building


def test_the_directory_appears_when_the_block_ends(tmp_path: Path) -> None:
    final = tmp_path / "cache" / "model"
    with building(final) as tmp:
        (tmp / "config.json").write_text("{}")
        assert not final.exists()
    assert (final / "config.json").read_text() == "{}"
    assert [p.name for p in final.parent.iterdir()] == ["model"]  # no scratch left beside it


def test_a_failed_build_leaves_nothing(tmp_path: Path) -> None:
    final = tmp_path / "model"
    with pytest.raises(RuntimeError, match="half"), building(final) as tmp:
        (tmp / "part").write_text("x")
        raise RuntimeError("half built")
    assert list(tmp_path.iterdir()) == []


def test_a_concurrent_builder_that_finished_first_keeps_its_copy(tmp_path: Path) -> None:
    final = tmp_path / "model"
    with building(final, lambda f: (f / "done").is_file()) as tmp:
        (tmp / "mine").write_text("x")
        final.mkdir()
        (final / "done").write_text("theirs")  # the other builder's rename landed first
    assert sorted(p.name for p in final.iterdir()) == ["done"]
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


def test_an_incomplete_directory_in_the_way_is_an_error(tmp_path: Path) -> None:
    final = tmp_path / "model"
    final.mkdir()
    (final / "stray").write_text("x")
    with pytest.raises(OSError), building(final, lambda f: (f / "done").is_file()):
        pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]

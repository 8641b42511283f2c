"""Linking the documented commands where a new shell finds them (`testbed.tools`), into a directory of the test's."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed import tools


@pytest.fixture
def tool_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "bin"
    directory.mkdir()
    monkeypatch.setenv("HEADRACE_TOOL_DIR", str(directory))
    return directory


def test_the_cli_is_linked_and_linking_again_changes_nothing(tool_dir: Path) -> None:
    first = tools.link(["headrace", "kubectl-headrace"])
    assert (tool_dir / "headrace").resolve() == tools.sources()["headrace"].resolve()
    assert all(": linked " in line for line in first), first
    again = tools.link(["headrace", "kubectl-headrace"])
    assert all(line.endswith("already") for line in again), again


def test_a_file_that_is_not_a_link_is_left_alone(tool_dir: Path) -> None:
    (tool_dir / "headrace").write_text("#!/bin/sh\n")
    (line,) = tools.link(["headrace"])
    assert "left" in line and (tool_dir / "headrace").read_text() == "#!/bin/sh\n"


def test_a_tool_not_built_yet_is_named_not_linked(tool_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tools.build, "binary", lambda name: tool_dir.parent / "missing" / name)
    (line,) = tools.link(["kubectl"])
    assert "does not exist yet" in line and not (tool_dir / "kubectl").exists()


def test_a_stale_link_is_replaced(tool_dir: Path) -> None:
    (tool_dir / "headrace").symlink_to(tool_dir / "gone")
    tools.link(["headrace"])
    assert (tool_dir / "headrace").resolve() == tools.sources()["headrace"].resolve()

"""The built wheel holds the product only: the `headrace` package, never the testbed or tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]


def _uv() -> str:
    found = os.environ.get("UV") or shutil.which("uv")
    if not found:
        pytest.fail("uv is needed to build the wheel (`make setup` installs it)")
    return found


def test_wheel_ships_only_the_headrace_package(tmp_path: Path) -> None:
    subprocess.run(
        [_uv(), "build", "--wheel", "--out-dir", str(tmp_path), str(REPOSITORY)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("headrace-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    code = [name for name in names if ".dist-info/" not in name]
    assert code, names
    assert all(name.startswith("headrace/") for name in code), [n for n in code if not n.startswith("headrace/")]
    assert not [name for name in names if "testbed" in name or name.endswith((".c", ".go"))]
    assert "headrace/runtime/__main__.py" in code
    assert "headrace/py.typed" in code

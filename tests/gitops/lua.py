"""Run Argo CD health checks (Lua) with the real `lua` interpreters installed on the machine.

Argo CD calls a health script with the resource in the global `obj` and reads the table it
returns. `assess` does the same: it writes the resource as a Lua table literal, runs a small
harness with the interpreter, and returns the script's (status, message).
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path
from typing import Any

# Lua 5.4 must exist; Lua 5.1 (the dialect of Argo CD's embedded gopher-lua) is used when installed.
INTERPRETERS = [name for name in ("lua5.4", "lua5.1") if shutil.which(name)]

_HARNESS = """
obj = dofile(arg[1])
local check = assert(loadfile(arg[2]))
local hs = check()
assert(type(hs) == "table", "the health script must return a table")
io.write(tostring(hs.status), "\\n", tostring(hs.message), "\\n")
"""


def _string(text: str) -> str:
    escaped = []
    for char in text:
        if char in ('"', "\\"):
            escaped.append("\\" + char)
        elif ord(char) < 32 or ord(char) == 127:
            escaped.append(f"\\{ord(char):03d}")
        else:
            escaped.append(char)
    return '"' + "".join(escaped) + '"'


def to_lua(value: Any) -> str:
    """A JSON value as a Lua expression (null becomes nil, as in Argo CD's conversion)."""
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"not representable in JSON: {value}")
        return repr(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list):
        return "{" + ", ".join(to_lua(item) for item in value) + "}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"[{_string(str(key))}] = {to_lua(item)}" for key, item in value.items()) + "}"
    raise TypeError(f"not a JSON value: {value!r}")


def assess(script: Path, resource: dict[str, Any], workdir: Path, interpreter: str = "lua5.4") -> tuple[str, str]:
    """Run one health script on one resource; returns (status, message)."""
    fixture = workdir / "fixture.lua"
    harness = workdir / "harness.lua"
    fixture.write_text("return " + to_lua(json.loads(json.dumps(resource))) + "\n")
    harness.write_text(_HARNESS)
    completed = subprocess.run(
        [interpreter, str(harness), str(fixture), str(script)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if completed.returncode != 0:
        raise AssertionError(f"{interpreter} failed on {script.name}: {completed.stderr}")
    status, message = completed.stdout.split("\n", 1)
    return status, message.rstrip("\n")

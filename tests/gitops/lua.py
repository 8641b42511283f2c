"""Run Argo CD health checks (Lua) with the real `lua` interpreters installed on the machine.

Argo CD calls a health script with the resource in the global `obj` and reads the table it
returns. `assess` does the same: it writes the resource as a Lua table literal, runs a small
harness with the interpreter, and returns the script's (status, message).

The harness gives the script what Argo CD's gopher-lua VM gives a custom health check (argo-cd
util/lua/lua.go and oslib_safe.go: `SkipOpenLibs`, then only the base, package and table libraries and
a safe `os`): no string library and no string methods, no io or math, and an `os` with only `time` and
`date`, whose `date` formats an explicit time in the local zone even after "!" (as Argo CD's does). The
clock is `now` (seconds since the epoch), so a check that reads it gives the same answer every run; run
it under another `TZ` to see it in a controller that is not on UTC.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# Lua 5.4 must exist; Lua 5.1 (the dialect of Argo CD's embedded gopher-lua) is used when installed.
INTERPRETERS = [name for name in ("lua5.4", "lua5.1") if shutil.which(name)]
NOW_DEFAULT = datetime(2026, 11, 21, 12, 1, 0, tzinfo=UTC)  # a minute after the fixtures' transition times

_HARNESS = """
obj = dofile(arg[1])
local now = tonumber(arg[3])
local real_date, real_time, sub = os.date, os.time, string.sub
local function argo_date(format, time)
  format = format or "%c"
  local utc = sub(format, 1, 1) == "!"
  if utc then format = sub(format, 2) end
  if time ~= nil then utc = false end
  return real_date((utc and "!" or "") .. format, time or now)
end
local function argo_time(fields)
  if fields == nil then return now end
  local copy = {}
  for key, value in pairs(fields) do
    if key ~= "isdst" then copy[key] = value end  -- Argo CD ignores isdst: the zone's offset at that time
  end
  return real_time(copy)
end
local env = {
  obj = obj, os = {time = argo_time, date = argo_date}, table = table,
  assert = assert, error = error, ipairs = ipairs, next = next, pairs = pairs, pcall = pcall, print = print,
  select = select, tonumber = tonumber, tostring = tostring, type = type, unpack = unpack,
  setmetatable = setmetatable, getmetatable = getmetatable, rawget = rawget, rawset = rawset, rawequal = rawequal,
}
getmetatable("").__index = nil
local check
if setfenv then
  check = assert(loadfile(arg[2]))
  setfenv(check, env)
else
  check = assert(loadfile(arg[2], "t", env))
end
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


def assess(
    script: Path,
    resource: dict[str, Any],
    workdir: Path,
    interpreter: str = "lua5.4",
    *,
    now: datetime | None = None,
    zone: str = "UTC",
) -> tuple[str, str]:
    """Run one health script on one resource at `now` (default NOW_DEFAULT) in the time zone `zone`; returns
    (status, message)."""
    fixture = workdir / "fixture.lua"
    harness = workdir / "harness.lua"
    fixture.write_text("return " + to_lua(json.loads(json.dumps(resource))) + "\n")
    harness.write_text(_HARNESS)
    clock = str(int((now or NOW_DEFAULT).timestamp()))
    completed = subprocess.run(
        [interpreter, str(harness), str(fixture), str(script), clock],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={**os.environ, "TZ": zone},
    )
    if completed.returncode != 0:
        raise AssertionError(f"{interpreter} failed on {script.name}: {completed.stderr}")
    status, message = completed.stdout.split("\n", 1)
    return status, message.rstrip("\n")

"""The spark-defaults.conf format, written by the operator (ConfigMap) and read and written by the runtime.

Owns: rendering a configuration so that Spark reads back exactly its keys and values, and parsing
such a file. Spark loads it with `java.util.Properties.load` (then trims values), so keys escape
the separators (`=`, `:`, white space) and both escape backslashes and line breaks; a value cannot
start or end with white space (Spark trims it), which rendering keeps as it is.
Never: I/O, deciding which keys exist.
"""

from __future__ import annotations

from collections.abc import Mapping

_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\f": "\\f"}
_KEY_ESCAPES = {**_ESCAPES, " ": "\\ ", "=": "\\=", ":": "\\:", "#": "\\#", "!": "\\!"}
_UNESCAPES = {"n": "\n", "r": "\r", "t": "\t", "f": "\f"}
_SEPARATORS = "=: \t\f"
_TRIMMED = "".join(chr(code) for code in range(33))  # what Scala's String.trim drops (every char <= ' ')


def _escape_key(key: str) -> str:
    return "".join(_KEY_ESCAPES.get(char, char) for char in key)


def _escape_value(value: str) -> str:
    escaped = "".join(_ESCAPES.get(char, char) for char in value)
    return "\\" + escaped if escaped.startswith((" ", "\t", "\f")) else escaped  # a leading blank is kept


def render(conf: Mapping[str, str], header: str | None = None) -> str:
    """One sorted `key value` line per setting, after an optional `# header` comment line."""
    lines = [f"# {header}"] if header else []
    lines.extend(f"{_escape_key(key)} {_escape_value(conf[key])}" for key in sorted(conf))
    return "".join(line + "\n" for line in lines)


def _logical_lines(text: str) -> list[str]:
    """Lines joined where one ends in an odd number of backslashes (leading blanks of the next dropped)."""
    joined: list[str] = []
    pending: str | None = None
    for raw in text.splitlines():
        line = raw.lstrip(" \t\f") if pending is not None else raw
        if pending is None and (not line.strip(" \t\f") or line.lstrip(" \t\f").startswith(("#", "!"))):
            continue
        line = (pending or "") + line
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2:
            pending = line[:-1]
            continue
        pending = None
        joined.append(line.lstrip(" \t\f"))
    if pending is not None:
        joined.append(pending.lstrip(" \t\f"))
    return joined


def _unescape(text: str) -> str:
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char == "\\" and index + 1 < len(text):
            following = text[index + 1]
            if following == "u" and index + 6 <= len(text):
                out.append(chr(int(text[index + 2 : index + 6], 16)))
                index += 6
                continue
            out.append(_UNESCAPES.get(following, following))
            index += 2
            continue
        if char != "\\":
            out.append(char)
        index += 1
    return "".join(out)


def _split(line: str) -> tuple[str, str]:
    """The raw key and value of a logical line (Properties.load's rules)."""
    index = 0
    while index < len(line) and line[index] not in _SEPARATORS:
        index += 2 if line[index] == "\\" else 1
    key, rest = line[:index], line[index:]
    rest = rest.lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return key, rest


def parse(text: str) -> dict[str, str]:
    """The settings of a spark-defaults file, as Spark reads them (values trimmed)."""
    conf: dict[str, str] = {}
    for line in _logical_lines(text):
        key, value = _split(line)
        conf[_unescape(key)] = _unescape(value).strip(_TRIMMED)
    return conf

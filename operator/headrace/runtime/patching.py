"""The only place the runtime reaches into PySpark's classes, so scripts run unmodified.

Owns: wrapping ``DataStreamWriter.option/options/queryName`` to remember what the script set,
``DataStreamWriter.start/toTable`` to hand every query start to the runtime, and
``SparkSession.stop`` so a script cannot stop the session under a running savepoint.
Never: decides anything; it records calls and delegates to the :class:`StartInterceptor`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from pyspark.sql import SparkSession
from pyspark.sql.streaming.readwriter import DataStreamWriter

_OPTIONS_ATTRIBUTE = "_headrace_options"
_NAME_ATTRIBUTE = "_headrace_query_name"
_FORMAT_ATTRIBUTE = "_headrace_format"
_START_PARAMETERS = ("format", "outputMode", "partitionBy", "queryName")


@dataclass
class StartCall:
    """What the script asked for when it started a query."""

    method: str  # "start" | "toTable"
    options: dict[str, str] = field(default_factory=dict)  # lower-cased keys
    query_name: str | None = None
    path: str | None = None
    format: str | None = None
    table: str | None = None

    @property
    def checkpoint_location(self) -> str | None:
        return self.options.get("checkpointlocation")

    @property
    def sink_path(self) -> str | None:
        return self.path or self.options.get("path")


class StartInterceptor(Protocol):
    def start_query(self, writer: DataStreamWriter, call: StartCall, launch: Callable[[], Any]) -> Any: ...

    def session_stop_requested(self, session: SparkSession) -> bool:
        """Return True to let the session stop now, False to defer it to the runtime's exit."""
        ...


def _recorded_options(writer: DataStreamWriter) -> dict[str, str]:
    options: dict[str, str] | None = getattr(writer, _OPTIONS_ATTRIBUTE, None)
    if options is None:
        options = {}
        setattr(writer, _OPTIONS_ATTRIBUTE, options)
    return options


def _call_of(writer: DataStreamWriter, method: str, options: dict[str, Any], query_name: str | None) -> StartCall:
    recorded = dict(_recorded_options(writer))
    recorded.update({key.lower(): str(value) for key, value in options.items() if value is not None})
    return StartCall(method=method, options=recorded, query_name=query_name or getattr(writer, _NAME_ATTRIBUTE, None))


class _Installed:
    """The interceptor and the original methods while the patches are installed."""

    interceptor: StartInterceptor | None = None
    originals: ClassVar[dict[str, Any]] = {}


def _original(name: str) -> Any:
    return _Installed.originals[name]


def start_unintercepted(writer: DataStreamWriter) -> Any:
    """Start `writer` with PySpark's own ``start`` (the runtime's own queries, such as the warm-up: never
    intercepted, tracked or checkpoint-managed)."""
    return _Installed.originals.get("start", DataStreamWriter.start)(writer)


def _interceptor() -> StartInterceptor:
    assert _Installed.interceptor is not None, "headrace.runtime patches are not installed"
    return _Installed.interceptor


def _option(self: DataStreamWriter, key: str, value: Any) -> DataStreamWriter:
    if value is not None:
        _recorded_options(self)[key.lower()] = str(value)
    return _original("option")(self, key, value)  # type: ignore[no-any-return]


def _options(self: DataStreamWriter, **values: Any) -> DataStreamWriter:
    _recorded_options(self).update({key.lower(): str(value) for key, value in values.items() if value is not None})
    return _original("options")(self, **values)  # type: ignore[no-any-return]


def _query_name(self: DataStreamWriter, name: str) -> DataStreamWriter:
    setattr(self, _NAME_ATTRIBUTE, name)
    return _original("queryName")(self, name)  # type: ignore[no-any-return]


def _format(self: DataStreamWriter, source: str) -> DataStreamWriter:
    setattr(self, _FORMAT_ATTRIBUTE, source)
    return _original("format")(self, source)  # type: ignore[no-any-return]


def _start(self: DataStreamWriter, path: str | None = None, *positional: Any, **extra: Any) -> Any:
    """``start(path, format, outputMode, partitionBy, queryName, **options)``."""
    arguments = dict(zip(_START_PARAMETERS, positional, strict=False))
    options = {key: value for key, value in extra.items() if key not in _START_PARAMETERS}
    arguments.update({key: value for key, value in extra.items() if key in _START_PARAMETERS})
    call = _call_of(self, "start", options, arguments.get("queryName"))
    call.path, call.format = path, arguments.get("format") or getattr(self, _FORMAT_ATTRIBUTE, None)
    return _interceptor().start_query(self, call, lambda: _original("start")(self, path, *positional, **extra))


def _to_table(self: DataStreamWriter, tableName: str, *positional: Any, **extra: Any) -> Any:  # noqa: N803
    """``toTable(tableName, format, outputMode, partitionBy, queryName, **options)``."""
    arguments = dict(zip(_START_PARAMETERS, positional, strict=False))
    options = {key: value for key, value in extra.items() if key not in _START_PARAMETERS}
    arguments.update({key: value for key, value in extra.items() if key in _START_PARAMETERS})
    call = _call_of(self, "toTable", options, arguments.get("queryName"))
    call.table, call.format = tableName, arguments.get("format")
    return _interceptor().start_query(self, call, lambda: _original("toTable")(self, tableName, *positional, **extra))


def _stop(self: SparkSession) -> None:
    if _interceptor().session_stop_requested(self):
        _original("stop")(self)


_WRITER_PATCHES: dict[str, Any] = {
    "option": _option,
    "options": _options,
    "queryName": _query_name,
    "format": _format,
    "start": _start,
    "toTable": _to_table,
}


def install(interceptor: StartInterceptor) -> Callable[[], None]:
    """Patch PySpark's classes; return a function that restores the originals."""
    if _Installed.interceptor is not None:
        raise RuntimeError("headrace.runtime patches are already installed")
    _Installed.interceptor = interceptor
    _Installed.originals = {name: getattr(DataStreamWriter, name) for name in _WRITER_PATCHES}
    _Installed.originals["stop"] = SparkSession.stop
    for name, patch in _WRITER_PATCHES.items():
        setattr(DataStreamWriter, name, patch)
    SparkSession.stop = _stop  # type: ignore[method-assign]

    def uninstall() -> None:
        for name in _WRITER_PATCHES:
            setattr(DataStreamWriter, name, _Installed.originals[name])
        SparkSession.stop = _Installed.originals["stop"]  # type: ignore[method-assign]
        _Installed.interceptor = None

    return uninstall

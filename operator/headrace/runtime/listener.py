"""The StreamingQueryListener the runtime registers on the script's SparkSession.

Owns: translating listener events (started, progress, terminated) into calls on a
:class:`QueryObserver`, with progress as a plain JSON dict.
Never: decides anything or lets an exception escape into Spark's listener bus.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Protocol

from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
)

log = logging.getLogger(__name__)


class QueryObserver(Protocol):
    def query_progressed(self, query_id: str, progress: dict[str, Any]) -> None: ...

    def query_terminated(self, query_id: str, error: str | None) -> None: ...


class RuntimeListener(StreamingQueryListener):
    """Forwards query events to the runtime."""

    def __init__(self, observer: QueryObserver) -> None:
        self._observer = observer

    def onQueryStarted(self, event: QueryStartedEvent) -> None:  # noqa: N802 - PySpark's API
        log.info("query started: id=%s runId=%s name=%s", event.id, event.runId, event.name)

    def onQueryProgress(self, event: QueryProgressEvent) -> None:  # noqa: N802
        try:
            self._observer.query_progressed(str(event.progress.id), json.loads(event.progress.json))
        except Exception:
            log.exception("progress event not recorded")

    def onQueryIdle(self, event: QueryIdleEvent) -> None:  # noqa: N802
        """Idle triggers carry no progress."""

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:  # noqa: N802
        try:
            self._observer.query_terminated(str(event.id), event.exception)
        except Exception:
            log.exception("termination event not recorded")

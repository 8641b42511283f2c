"""bench/vs_flink.py's sink check: a committed file is counted once, however its scans interleave."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import sys
import threading
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench" / "vs_flink.py"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("vs_flink", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("vs_flink", module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_a_file_committed_while_the_check_scans_beside_the_watcher_is_counted_once(tmp_path: Path) -> None:
    """The watcher's thread scans every 0.1 s and check_sink scans once more itself: when a file is committed just
    then (an engine still draining its backlog after the kill -9), both scans list it before either has read it.
    Before the fix both read it: every window in it held twice its events (the doubled windows seen once)."""
    vs_flink = _bench()
    rows = [{"window_start": f"2026-11-27 12:00:{second:02d}", "user_id": "u1", "hits": 7} for second in (0, 10, 20)]
    part = tmp_path / "part-0.json"
    part.write_text("".join(json.dumps(row) + "\n" for row in rows))
    both_listed = threading.Barrier(2, timeout=5)  # passed only if both scans list at once
    listed = threading.Event()  # the file is committed from now on

    def committed() -> list[Path]:
        if not listed.is_set():
            return []
        with contextlib.suppress(threading.BrokenBarrierError):
            both_listed.wait()  # the two scans hold the listing at the same moment, if they can
        return [part]

    watcher = vs_flink.SinkWatcher(committed)
    try:
        listed.set()
        watcher.scan()  # check_sink's own scan, beside the watcher's thread
    finally:
        watcher.close()
    assert dict(watcher.hits) == {start: 7 for start in watcher.hits} and len(watcher.hits) == 3
    assert set(watcher.rows.values()) == {1}

"""The driver-log ConfigMap: the tail of an ended driver's log, owned by the app, never pruned with an attempt."""

from __future__ import annotations

from headrace.api import names
from headrace.render import manifests


def test_the_kept_log_is_the_tail_owned_by_the_app() -> None:
    log = "head\n" + "x" * manifests.DRIVER_LOG_MAX_CHARS
    kept = manifests.driver_log_config_map(
        "clicks", "analytics", "uid-1", pod="clicks-r1-a1-driver", log=log, saved_at="2026-11-27T12:00:00Z"
    )
    assert kept["metadata"]["name"] == names.driver_log("clicks") == "clicks-driver-log"
    assert kept["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert set(kept["metadata"]["labels"]) == set(names.app_labels("clicks"))  # no run label: never pruned
    assert kept["data"]["log"] == "x" * manifests.DRIVER_LOG_MAX_CHARS  # the tail, the head cut
    assert (kept["data"]["pod"], kept["data"]["savedAt"]) == ("clicks-r1-a1-driver", "2026-11-27T12:00:00Z")

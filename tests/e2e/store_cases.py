"""The cases every object store's e2e module runs on its app (tests/e2e/test_web_identity.py: S3 through a web
identity; tests/e2e/test_gcs_state.py: GCS): a force-deleted driver's successor commits from the checkpoint in the
store, a savepoint upgrade writes its savepoint there and restores it into a new run, and the sink holds every event
exactly once. Each module says how to list its store (`Listing`: object names under a prefix of its bucket). Their
apps, and tests/e2e/test_object_storage.py's, keep `STATE_PARTITIONS` state partitions.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from headrace.api import names
from testbed import scenario
from testbed.sink import wait_for_every_window

COMMIT = re.compile(r"/commits/\d+$")
# The app's state partitions on the store (the example's 8 each write their files to the bucket every batch, in
# both queries): 2 still spread each query's state over more than one store file of the executors, with a quarter
# of the object-store round trips per batch, per recovery and per savepoint copy.
STATE_PARTITIONS = 2
Listing = Callable[[str], list[str]]  # object names under a prefix of the bucket


def commits(listing: Listing, app: scenario.AppHandle) -> set[str]:
    """The checkpoint commit files of `app`'s runs in the store."""
    return {name for name in listing(f"{app.namespace}/state/") if COMMIT.search(name)}


def driver_deleted_recovers_from_the_checkpoint(listing: Listing, app: scenario.AppHandle, store: str) -> None:
    """The driver pod force-deleted: the next attempt commits a batch to the store."""
    with scenario.Writer(app.input):
        old = app.wait(lambda: app.running(names.ROLE_DRIVER), 120, "the driver")[0]
        clock = time.monotonic()
        app.core.delete_namespaced_pod(old.metadata.name, app.namespace, grace_period_seconds=0)
        app.wait(
            lambda: [pod for pod in app.running(names.ROLE_DRIVER) if pod.metadata.name != old.metadata.name],
            300,
            "a new driver attempt",
        )
        before = commits(listing, app)
        app.wait(lambda: commits(listing, app) - before, 300, f"a batch committed to {store} by the new driver")
        print(f"driver force-deleted -> first batch of the new driver: {time.monotonic() - clock:.1f}s")


def savepoint_restores_into_a_new_run(listing: Listing, app: scenario.AppHandle, prefix: str) -> None:
    """A savepoint upgrade (a changed trigger interval): the new run restores a savepoint under the app's savepoint
    directory in the bucket (`prefix`, e.g. gs://bucket/), and that savepoint holds commits."""
    number = int(app.status()["run"]["number"])
    args = list(app.app()["spec"]["application"]["args"])
    args[args.index("--trigger-seconds") + 1] = "3"
    with scenario.Writer(app.input):
        clock = time.monotonic()
        app.patch_spec({"application": {"args": args}})
        status = app.wait(
            lambda: (s := app.status()).get("phase") == "Running" and int(s["run"]["number"]) == number + 1 and s,
            600,
            "the new run restored from a savepoint",
        )
        before = commits(listing, app)
        app.wait(lambda: commits(listing, app) - before, 300, "a batch of the restored run")
        print(f"savepoint upgrade -> restored run commits: {time.monotonic() - clock:.1f}s")
    restored = status["run"]["restoredFrom"]
    assert restored.startswith(f"{prefix}{app.namespace}/savepoints/"), restored
    assert [name for name in listing(restored.removeprefix(prefix)) if COMMIT.search(name)], "no commits in it"


def sink_holds_every_event_exactly_once(app: scenario.AppHandle) -> None:
    """Every window of the input once, with its exact count."""
    expected = scenario.expected_tumbling_counts(app.input.counted())
    app.input.flush()
    result = wait_for_every_window(app, expected, timeout=300)
    assert {key: result[key] for key in expected} == dict(expected)

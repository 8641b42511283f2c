"""A driver that stops answering is replaced (issue 13, finding 4): restartPolicy.heartbeatTimeout, on by default."""

from __future__ import annotations

from dataclasses import replace

from headrace.core.plan import DeletePod
from headrace.core.planner import decide

from .builders import T0, later, pod, seen, spec, view


def test_a_driver_that_stops_answering_is_replaced_after_the_heartbeat_timeout() -> None:
    assert spec().restartPolicy.heartbeatTimeout == "2m"  # on by default
    status = decide(view(), seen(), T0).status
    status = decide(view(status=status), seen(pod()), later(1)).status
    silent = replace(seen(pod()), progress=None, unanswered=True)
    first = decide(view(status=status), silent, later(30))
    assert first.actions == ()
    assert first.status.run is not None and first.status.run.unansweredSince == "2026-11-21T12:00:30Z"
    assert first.requeue_after is not None and first.requeue_after <= 10
    still = decide(view(status=first.status), silent, later(140))
    assert still.actions == () and still.status.phase == "Running"
    gone = decide(view(status=still.status), silent, later(151))
    # a frozen JVM ignores SIGTERM: the kubelet's SIGKILL comes after 1 s, not the pod's 30 s
    assert gone.actions == (DeletePod(name=pod().name, reason="DriverUnresponsive", grace_seconds=1),)
    assert gone.status.restarts.lastFailureReason == "DriverUnresponsive"
    assert "heartbeatTimeout 2m" in (gone.status.restarts.lastFailureMessage or "")
    assert gone.status.phase == "Restarting"


def test_an_answer_clears_the_missed_heartbeats() -> None:
    status = decide(view(), seen(), T0).status
    status = decide(view(status=status), seen(pod()), later(1)).status
    silent = replace(seen(pod()), progress=None, unanswered=True)
    missed = decide(view(status=status), silent, later(30)).status
    answered = decide(view(status=missed), seen(pod()), later(100)).status
    assert answered.run is not None and answered.run.unansweredSince is None
    again = decide(view(status=answered), silent, later(200))  # counts from here, not from the first miss
    assert again.actions == ()

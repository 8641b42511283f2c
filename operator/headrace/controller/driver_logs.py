"""Keeping the log of a driver that ended, before its pod is deleted (docs/operations.md, "Logs").

Owns: copying the tail of the driver container's log (`LOG_TAIL_LINES` lines, at most
`manifests.DRIVER_LOG_MAX_CHARS` characters) into the app's driver-log ConfigMap when the planner deletes a driver
pod that has ended (`DeletePod.keep_log`): a failed attempt's log stays readable (`headrace logs --previous`) after
the next attempt's start removes its pod. The pod itself is not kept: it is deleted as before, so the fence (a new
attempt only once the previous driver pod is gone) and the executors' removal are unchanged.
Never: blocks the deletion. A log that cannot be read (the pod's node is lost, the container never started) or
saved is logged and skipped.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from headrace.adapters.kube import KubeClient
from headrace.core.timefmt import format_time
from headrace.render import manifests

logger = logging.getLogger(__name__)

LOG_TAIL_LINES = 4000


def keep(kube: KubeClient, app: dict[str, Any], pod: str, now: datetime) -> bool:
    """Copy the log tail of the ended driver `pod` of `app` (its body) into the app's driver-log ConfigMap;
    whether it was kept."""
    metadata = app["metadata"]
    namespace = metadata["namespace"]
    try:
        text = kube.read_log_tail(namespace, pod, manifests.DRIVER_CONTAINER, LOG_TAIL_LINES)
        if text is None:
            logger.info("driver %s/%s has no log to keep", namespace, pod)
            return False
        saved = manifests.driver_log_config_map(
            metadata["name"], namespace, metadata["uid"], pod=pod, log=text, saved_at=format_time(now)
        )
        kube.put_config_map(saved)
    except (ApiException, HTTPError, OSError) as error:
        logger.warning("could not keep the log of driver %s/%s: %s", namespace, pod, error)
        return False
    return True

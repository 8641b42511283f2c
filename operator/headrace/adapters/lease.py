"""The leader-election Lease (coordination.k8s.io/v1) as the operator reads and writes it.

Owns: get, create and replace of one Lease, translating its spec to and from `LeaseRecord`.
Writes are optimistic: create fails if it exists, replace carries the resourceVersion it read; a
409 from either means another candidate wrote first, and comes back as False ("lost the race").
Every call has a timeout, so a hung connection never outlives the renew deadline.
Never: decides who leads (that is `headrace.core.election`).
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from headrace.adapters.kube import release
from headrace.core.election import LeaseRecord, StoredLease, lease_record, lease_spec

HTTP_NOT_FOUND = 404
HTTP_CONFLICT = 409


class LeaseClient:
    """One Lease, by namespace and name (thread-safe: the renewer and the main thread share it)."""

    def __init__(self, api_client: client.ApiClient, namespace: str, name: str, *, timeout_seconds: float) -> None:
        # Any: the stubs want V1Lease models; the operator sends and reads plain JSON (no model round trip).
        self.coordination: Any = client.CoordinationV1Api(api_client)
        self.namespace, self.name = namespace, name
        self.timeout_seconds = timeout_seconds

    def get_lease(self) -> StoredLease | None:
        """The Lease, or None when there is none yet."""
        try:
            response = self.coordination.read_namespaced_lease(
                self.name, self.namespace, _preload_content=False, _request_timeout=self.timeout_seconds
            )
        except ApiException as error:
            if error.status == HTTP_NOT_FOUND:
                return None
            raise
        body = json.loads(response.data)
        return StoredLease(lease_record(body.get("spec") or {}), body["metadata"]["resourceVersion"])

    def create_lease(self, record: LeaseRecord) -> bool:
        """Create the Lease holding `record`; False if someone created it first."""
        body = {"metadata": {"name": self.name, "namespace": self.namespace}, "spec": lease_spec(record)}
        try:
            release(
                self.coordination.create_namespaced_lease(
                    self.namespace, body, _preload_content=False, _request_timeout=self.timeout_seconds
                )
            )
        except ApiException as error:
            if error.status == HTTP_CONFLICT:
                return False
            raise
        return True

    def replace_lease(self, record: LeaseRecord, resource_version: str) -> bool:
        """Write `record` over the version read; False if the Lease changed since (or is gone)."""
        body = {
            "metadata": {"name": self.name, "namespace": self.namespace, "resourceVersion": resource_version},
            "spec": lease_spec(record),
        }
        try:
            release(
                self.coordination.replace_namespaced_lease(
                    self.name, self.namespace, body, _preload_content=False, _request_timeout=self.timeout_seconds
                )
            )
        except ApiException as error:
            if error.status in (HTTP_CONFLICT, HTTP_NOT_FOUND):
                return False
            raise
        return True

"""Every I/O boundary of the operator: the Kubernetes API and the driver's control endpoint.

Owns: calls, retries of idempotent calls, and translating API objects to plain dicts.
Never: deciding what to do (that is `headrace.core`).
"""

"""The control Secrets the operator remembers: a read that a `forget` overtook is not kept."""

from __future__ import annotations

from headrace.controller.control_secrets import ControlSecrets, Values


def test_a_read_overtaken_by_a_forget_is_used_once_not_kept() -> None:
    """A driver asked ahead of a poll reads the Secret while a reconciliation completes it (forget, write, forget):
    the old values read meanwhile must not stay remembered, or the driver is never asked with the new ones."""
    stored: Values = {"token": "t"}
    reads: list[Values] = []
    secrets: ControlSecrets

    def read(namespace: str, app: str) -> Values:
        values = dict(stored)
        reads.append(values)
        if len(reads) == 1:  # the reconciliation writes the Secret while this read is under way
            stored["tls.crt"] = "cert"
            secrets.forget(namespace, app)
        return values

    secrets = ControlSecrets(read)
    assert secrets.values("ns", "app", "uid") == {"token": "t"}  # the read's own answer
    assert secrets.values("ns", "app", "uid") == {"token": "t", "tls.crt": "cert"}  # read again, not the stale one
    assert secrets.values("ns", "app", "uid") == {"token": "t", "tls.crt": "cert"}
    assert len(reads) == 2  # kept from the second read on

"""KRaft cluster ids for the testbed broker: Kafka's own rule, never an id that starts with "-"."""

from __future__ import annotations

import base64

from testbed.kafka import new_cluster_id

_DASH_FIRST = b"\xf8" + bytes(15)  # URL-safe base64 of 0b111110… starts with "-"
_PLAIN = bytes(range(16))


def test_an_id_that_would_start_with_a_dash_is_drawn_again() -> None:
    assert base64.urlsafe_b64encode(_DASH_FIRST).decode().startswith("-")
    draws = iter((_DASH_FIRST, _DASH_FIRST, _PLAIN))
    assert new_cluster_id(lambda: next(draws)) == base64.urlsafe_b64encode(_PLAIN).decode().rstrip("=")


def test_ids_are_22_characters_without_padding() -> None:
    cluster_id = new_cluster_id()
    assert len(cluster_id) == 22
    assert "=" not in cluster_id
    assert not cluster_id.startswith("-")

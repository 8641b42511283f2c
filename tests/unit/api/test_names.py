"""Names the operator gives: savepoints asked within one second stay distinct."""

from __future__ import annotations

from datetime import UTC, datetime

from headrace.api import names


def test_two_savepoints_in_the_same_second_get_different_names() -> None:
    first = names.savepoint_name("orders", "manual", datetime(2026, 11, 24, 3, 40, 1, 120_000, tzinfo=UTC))
    second = names.savepoint_name("orders", "manual", datetime(2026, 11, 24, 3, 40, 1, 870_000, tzinfo=UTC))
    assert first == "orders-manual-20261124034001120"
    assert second != first


def test_a_savepoint_name_is_a_valid_subdomain_even_for_a_long_app() -> None:
    name = names.savepoint_name("a" * 250, "periodic", datetime(2026, 11, 24, tzinfo=UTC))
    assert len(name) <= 253

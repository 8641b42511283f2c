"""The operator's log configuration: kopf's per-event INFO lines left out, warnings and our own lines kept."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from headrace.app import KOPF_OBJECT_LOGGER, configure_logging


@pytest.fixture(autouse=True)
def _restored() -> Iterator[None]:
    """The logging configuration as it was before the test (kopf.configure replaces the root's handler)."""
    root, objects = logging.getLogger(), logging.getLogger(KOPF_OBJECT_LOGGER)
    handlers, level, objects_level = list(root.handlers), root.level, objects.level
    yield
    root.handlers[:], root.level = handlers, level
    objects.setLevel(objects_level)


def _emitted(logger: str, level: int, capsys: pytest.CaptureFixture[str]) -> bool:
    """Whether a line logged to `logger` at `level` reaches the operator's output (kopf's stream handler)."""
    capsys.readouterr()
    logging.getLogger(logger).log(level, "probe line")
    return "probe line" in capsys.readouterr().err


def test_kopfs_per_event_lines_are_left_out_and_warnings_and_our_own_lines_kept(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging(verbose=False)
    assert not _emitted(KOPF_OBJECT_LOGGER, logging.INFO, capsys)  # "Handler 'pod-changed' succeeded."
    assert _emitted(KOPF_OBJECT_LOGGER, logging.WARNING, capsys)
    assert _emitted(KOPF_OBJECT_LOGGER, logging.ERROR, capsys)
    assert _emitted("headrace.controller.reconciler", logging.INFO, capsys)
    assert _emitted("kopf.activities.startup", logging.INFO, capsys)


def test_verbose_shows_kopfs_per_event_lines_again(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging(verbose=True)
    assert _emitted(KOPF_OBJECT_LOGGER, logging.INFO, capsys)
    assert _emitted(KOPF_OBJECT_LOGGER, logging.DEBUG, capsys)

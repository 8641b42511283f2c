"""The host check names every missing package with the command that installs it; `make setup` installs them."""

from __future__ import annotations

import pytest

from testbed import host


def test_every_listed_package_is_installed_by_setup() -> None:
    """`make setup` ran `python -m testbed host install` before the tests, on this machine as on a fresh one."""
    assert host.missing() == []


def test_missing_packages_are_named_with_the_fix() -> None:
    absent = host.HostPackage("no-such-package", ("headrace-no-such-command",), why="a test")
    with pytest.raises(host.HostNotReady) as raised:
        host.require([absent, *host.HOST_PACKAGES])
    message = str(raised.value)
    assert "no-such-package: a test" in message
    assert "make setup" in message
    assert "apt-get install -y no-such-package" in message
    assert "containerd" not in message  # present packages are not listed


def test_nothing_to_install_is_a_no_op() -> None:
    assert host.install_command([]) == []
    assert host.install(host.HOST_PACKAGES) == []

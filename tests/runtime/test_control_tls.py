"""The real runtime process (`python -m headrace.runtime`) serves its control endpoint over TLS when the operator
mounts the app's certificate (issue 12): the operator's client, trusting that certificate only, reads its status;
plain HTTP gets no answer; the metrics port stays plain HTTP; certificate files that cannot be loaded stop the
runtime (exit 2) instead of serving plain HTTP."""

from __future__ import annotations

import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from headrace.adapters.driver import DriverControl, DriverEndpoint, DriverUnavailable
from headrace.api import names
from headrace.api import runtime_contract as contract
from headrace.render import control_tls

from .harness import TOKEN, RuntimeProcess, write_events

pytestmark = pytest.mark.spark


def _mounted(directory: Path, made: control_tls.ControlCertificate) -> Path:
    """The files as the driver's Secret volume holds them (mode 0444, the volume's defaultMode)."""
    directory.mkdir()
    for name, content in made.secret_values().items():
        (directory / name).write_text(content)
        (directory / name).chmod(0o444)
    return directory


def test_the_runtime_serves_its_control_endpoint_over_tls_only(tmp_path: Path) -> None:
    made = control_tls.control_certificate(
        "clicks", "analytics", ec.generate_private_key(ec.SECP256R1()), datetime.now(UTC)
    )
    inputs, output = tmp_path / "in", tmp_path / "out"
    write_events(inputs, 2, 5)
    env = {
        contract.ENV_CHECKPOINT_DIR: str(tmp_path / "checkpoints"),
        contract.ENV_CONTROL_TLS_DIR: str(_mounted(tmp_path / "tls", made)),
    }
    runtime = RuntimeProcess(tmp_path, ["--input", str(inputs), "--output", str(output)], env).start()
    try:
        client = DriverControl(timeout_seconds=5, port=runtime.control_port)
        pinned = DriverEndpoint("127.0.0.1", TOKEN, made.certificate, names.control_server_name("clicks", "analytics"))
        deadline, answer = time.monotonic() + 120, None
        while answer is None and time.monotonic() < deadline and runtime.alive():
            try:
                answer = client.status(pinned)
            except DriverUnavailable:
                time.sleep(0.5)
        assert answer is not None and answer.get("phase"), runtime.log()
        with pytest.raises(DriverUnavailable):
            client.status(DriverEndpoint("127.0.0.1", TOKEN, certificate=None))
        with urllib.request.urlopen(f"http://127.0.0.1:{runtime.metrics_port}/metrics", timeout=10) as metrics:
            assert metrics.status == 200  # Prometheus scrapes plain HTTP
        assert "control endpoint (HTTPS)" in runtime.log()
    finally:
        runtime.kill()


def test_unloadable_certificate_files_stop_the_runtime(tmp_path: Path) -> None:
    (tmp_path / "tls").mkdir()
    (tmp_path / "tls" / contract.CONTROL_TLS_CERT_FILE).write_text("not a certificate")
    (tmp_path / "tls" / contract.CONTROL_TLS_KEY_FILE).write_text("not a key")
    runtime = RuntimeProcess(tmp_path, [], {contract.ENV_CONTROL_TLS_DIR: str(tmp_path / "tls")}).start()
    try:
        assert runtime.wait(60) == contract.EXIT_USAGE
        termination = runtime.termination()
        assert termination["reason"] == "InvalidInvocation"
        assert contract.ENV_CONTROL_TLS_DIR in termination["message"]
    finally:
        runtime.kill()

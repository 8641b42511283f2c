"""The case every object store's runtime test runs (tests/runtime/test_s3a.py, test_gcs.py, test_azure.py): the job
jobs/object_store_state.py checkpoints a stateful query to the store with exactly the settings the operator renders,
a second run replays the first's uncommitted batch and counts on from the state in the store, and the runtime's
HadoopFileSystem copies the checkpoint there (the savepoint path) server-side. Each test brings its server, settings
and credentials, and lists its store itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from headrace.render import manifests
from tests.unit.builders import attempt

JOB = Path(__file__).parent / "jobs" / "object_store_state.py"
AUTH_JOB = Path(__file__).parent / "jobs" / "object_store_auth.py"


def rendered_store_conf(checkpoint: str, block: str, state: dict[str, object], *prefixes: str) -> dict[str, str]:
    """The Spark settings the operator renders for `checkpoint` with `spec.state.<block>` = `state`, only those under
    ``spark.hadoop.<prefix>`` and the checkpoint file manager (what a local-mode job needs of them)."""
    rendered = manifests.spark_conf(attempt(state__checkpointDir=checkpoint, **{f"state__{block}": state}))
    wanted = tuple(f"spark.hadoop.{prefix}" for prefix in prefixes)
    return {
        key: value
        for key, value in rendered.items()
        if key.startswith(wanted) or key == "spark.sql.streaming.checkpointFileManagerClass"
    }


def run_state_job(
    tmp_path: Path, endpoint: str, checkpoint: str, copy: str, *, jars: list[Path], env: dict[str, str]
) -> dict[str, Any]:
    """Run the job on two input files (a third arrives for the second run) with `env` (the job reads STATE_CONF and
    DISPOSE_COPY from it); its outcome."""
    inputs = tmp_path / "input"
    inputs.mkdir()
    (inputs / "a.txt").write_text("a\nb\n")
    (inputs / "b.txt").write_text("a\n")
    result = tmp_path / "result.json"
    command = [sys.executable, str(JOB), endpoint, checkpoint, copy, str(inputs), str(result)]
    _run_job(tmp_path, [*command, ",".join(map(str, jars))], env, timeout=600)
    outcome: dict[str, Any] = json.loads(result.read_text())
    return outcome


def run_auth_job(tmp_path: Path, targets: str, *, jars: list[Path], env: dict[str, str]) -> str:
    """Run jobs/object_store_auth.py (it writes and reads each of the comma-separated `targets` with the settings in
    `env`'s STATE_CONF); its standard output."""
    return _run_job(tmp_path, [sys.executable, str(AUTH_JOB), targets, ",".join(map(str, jars))], env, timeout=300)


def _run_job(tmp_path: Path, command: list[str], env: dict[str, str], *, timeout: int) -> str:
    """Run a job to its end with Spark's and the JVM's temporary files in the test's directory (not in /tmp)."""
    scratch = tmp_path / "tmp"
    scratch.mkdir(exist_ok=True)
    env = {**env, "TMPDIR": str(scratch), "SPARK_LOCAL_DIRS": str(scratch)}
    env["JDK_JAVA_OPTIONS"] = f"-Djava.io.tmpdir={scratch}"
    completed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert completed.returncode == 0, completed.stderr[-4000:]
    return completed.stdout


def check_replayed_and_copied(outcome: dict[str, Any], names: list[str], *, disposed: bool) -> None:
    """The second run counted on from the first's state (its uncommitted batch replayed over the existing state
    files with the same counts, then the new file once); every checkpoint file was copied by the store itself; the
    copy is gone when `disposed`. `names`: the store's object names under ``checkpoints/q/``."""
    assert "checkpoints/q/commits/1" in names
    assert outcome["runs"][0] == {"a": 2, "b": 1}
    assert outcome["runs"][1] == {"a": 3, "b": 3}
    assert outcome["batches"] == [{"a": 2, "b": 1}, {"a": 2, "b": 1}, {"a": 3, "b": 3}]
    assert outcome["missing"] == ["offsets/999"]  # asked for, never there
    assert outcome["copied"] == outcome["files"]
    if disposed:
        assert outcome["copy_left"] is False
    assert outcome["server_side"] == len(outcome["files"])  # every file copied by the store, not through the driver
    assert any(name.startswith("state/") for name in outcome["files"])
    assert {f"checkpoints/q/{name}" for name in outcome["files"]} <= set(names)

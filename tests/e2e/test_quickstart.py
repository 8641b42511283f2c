"""The quick start's example, applied by the quick start's own code on the e2e cluster, as a user gets it.

`make quickstart` runs `testbed.quickstart.main`: cluster up, images, the operator by Helm (the e2e
fixture has done those three the same way), then `apply_example`. This test runs `apply_example` itself,
with the same data location rules (a world-traversable directory, whatever the home directory's mode) and
the same default source (the cluster's Kafka as ``kafka.kafka.svc:9092``, fed by the quick start's
producer), and requires the example to commit batches with zero driver restarts and its sink to hold
exactly the expected window counts. Last, the README's "what to try" block and the quick start's printed next
steps run as written, in a new shell with the system PATH only.
"""

from __future__ import annotations

import itertools
import re
import shlex
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from headrace.api import names
from testbed import REPOSITORY, quickstart, scenario, tools
from testbed.controlplane import delete_namespace
from testbed.sink import wait_for_every_window

from .conftest import E2E

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def example(e2e: E2E) -> Iterator[scenario.AppHandle]:
    with e2e.api_client() as api:
        try:
            _an_earlier_quickstarts_output(e2e.data_root / quickstart.NAMESPACE / "output")
            data, clicks = quickstart.apply_example(e2e, files=10)
            assert isinstance(clicks, scenario.ClickTopic), "the quick start reads from Kafka by default"
            handle = scenario.AppHandle(api, quickstart.NAMESPACE, data)
            handle.input = clicks
            yield handle
        finally:
            delete_namespace(api, quickstart.NAMESPACE)


def _an_earlier_quickstarts_output(output: Path) -> None:
    """What `make quickstart` on a new cluster finds when an earlier one ran here: the old output, its sink log
    at batch 3, while the checkpoints went with the old cluster. Applied as it is, Spark would skip batches 0..3
    of the new checkpoint (the runtime refuses: SinkAhead, and no batch would commit); the quick start clears it."""
    for query in ("tumbling", "sliding"):
        log = output / query / "_spark_metadata"
        log.mkdir(parents=True, exist_ok=True)
        for batch in range(4):
            (log / str(batch)).write_text("v1\n")


def test_quickstart_example_commits_batches_without_a_restart(example: scenario.AppHandle) -> None:
    started = time.monotonic()
    example.wait(lambda: example.running(names.ROLE_DRIVER), 300, "the quick start's driver to run")
    example.wait(lambda: len(example.commits()) >= 2, 300, "two committed batches")
    assert example.status()["run"]["checkpointDir"].startswith("s3a://headrace/"), "state in the bucket by default"
    print(f"quick start example: apply -> 2 committed batches in {time.monotonic() - started:.1f}s")
    status = example.status()
    assert status.get("phase") == "Running", status
    assert status.get("restarts", {}).get("total", 0) == 0, status
    (driver,) = example.pods(names.ROLE_DRIVER)
    assert driver.metadata.labels[names.ATTEMPT] == "1", driver.metadata.labels
    assert all(s.restart_count == 0 for s in driver.status.container_statuses or []), driver.status
    assert "kafka.kafka.svc:9092" in example.app()["spec"]["application"]["args"]


MAPPED_ARCHIVE = "grep -l /opt/headrace/jvm/spark.jsa /proc/[0-9]*/maps 2>/dev/null || true"


def test_driver_and_executor_jvms_map_the_images_class_data_archive(e2e: E2E, example: scenario.AppHandle) -> None:
    """Both JVMs use the image's class-data sharing archive (a classpath that does not match it would not)."""
    (driver,) = example.pods(names.ROLE_DRIVER)
    executor = example.wait(lambda: example.running(names.ROLE_EXECUTOR), 300, "an executor")[0]
    for pod in (driver, executor):
        out = e2e.kubectl("exec", "-n", example.namespace, pod.metadata.name, "--", "sh", "-c", MAPPED_ARCHIVE)
        assert "/maps" in out, f"{pod.metadata.name}: no process maps the archive: {out}"


def test_quickstart_sink_holds_exactly_the_produced_clicks(example: scenario.AppHandle) -> None:
    example.input.next_file()  # a chunk produced while the query runs, not only before it started
    expected = scenario.expected_tumbling_counts(example.input.counted())
    example.input.flush()
    started = time.monotonic()

    result = wait_for_every_window(example, expected, timeout=300)
    print(f"quick start example (Kafka): flush -> every window in the sink in {time.monotonic() - started:.1f}s")
    assert dict(result) == dict(expected)
    assert sum(expected.values()) == len(example.input.counted()) == 11 * scenario.EVENTS_PER_FILE
    assert example.status().get("restarts", {}).get("total", 0) == 0


def test_quickstart_status_reports_the_event_time_watermark(example: scenario.AppHandle) -> None:
    """After the sink test's flush, the app's status shows a watermark in the clicks' event time (not the
    epoch a query reports before it has seen data) within a heartbeat or two: what `kubectl get sapp` shows."""

    def watermark() -> str | None:
        progress = example.status().get("progress") or {}
        mark = progress.get("watermark")
        return mark if mark and mark >= scenario.BASE.strftime("%Y-%m-%d") else None

    seen = example.wait(watermark, 120, "a watermark in the clicks' event time in the app's status")
    print(f"quick start example: status watermark {seen}, progress {example.status().get('progress')}")


def test_pod_data_lives_where_the_image_user_can_read_it(example: scenario.AppHandle) -> None:
    assert scenario.unreadable_ancestor(example.data) is None, example.data


def test_a_data_root_under_a_private_directory_is_refused(tmp_path: Path) -> None:
    private = tmp_path / "home"
    private.mkdir(mode=0o700)
    with pytest.raises(PermissionError, match="not world-traversable"):
        scenario.prepare_data_dir(private / "data", "demo")


# --- the commands a newcomer runs, as written -----------------------------------------------------------------

SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # a new login shell's, nothing added
NOT_RUN = ("make down",)  # it stops the background cluster; here it would tear down this test's node (tests/testbed)


def readme_commands() -> list[str]:
    """The command lines of the README's "what to try" block (the quick start section's second bash block)."""
    section = (REPOSITORY / "README.md").read_text().split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 2 and blocks[0].strip() == "make quickstart", blocks
    return [line for line in blocks[1].splitlines() if line.strip()]


def printed_commands(text: str) -> list[str]:
    """The indented command lines under "Try" in what the quick start prints at its end."""
    lines = text.split("Try", 1)[1].splitlines()[1:]
    return [line.strip() for line in itertools.takewhile(lambda line: line.startswith("  "), lines)]


def run_as_a_newcomer(commands: list[str], home: Path, kafka_bootstrap: str) -> str:
    """The lines in one new bash in the checkout, with the system PATH only and a home of its own (so ~ is not
    this process's); stops at the first failing line and names it. The home's ~/.cache/headrace/cluster/kubeconfig
    is this cluster's, as the quick start's is on a user's machine; its Kafka is the quick start's producer target."""
    commands = [line for line in commands if line.split("#", 1)[0].strip() not in NOT_RUN]
    script = "set -e\n" + "".join(f"echo {shlex.quote('$ ' + line)}\n{line}\n" for line in commands)
    env = {"HOME": str(home), "PATH": SYSTEM_PATH, "LANG": "C.UTF-8", "HEADRACE_KAFKA_BOOTSTRAP": kafka_bootstrap}
    done = subprocess.run(
        ["bash", "--noprofile", "--norc", "-c", script],
        cwd=REPOSITORY, env=env, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"a command failed as written:\n{done.stdout[-6000:]}\n{done.stderr[-4000:]}"
    return done.stdout


@pytest.fixture
def newcomer_home(e2e: E2E, tmp_path: Path) -> Path:
    """A home directory whose ~/.cache/headrace/cluster/kubeconfig is this cluster's (a user's quick start puts its
    own there), and the documented tools linked where a new shell finds them (what `make setup` and the quick start
    do: `testbed.tools`)."""
    kubeconfig = tmp_path / ".cache" / "headrace" / "cluster" / "kubeconfig"
    kubeconfig.parent.mkdir(parents=True)
    kubeconfig.symlink_to(e2e.kubeconfig)
    for line in tools.link():
        print(f"tools: {line}")
    return tmp_path


def test_the_readme_and_the_printed_next_steps_work_as_written(
    e2e: E2E, example: scenario.AppHandle, newcomer_home: Path
) -> None:
    """Last in this module: it produces more clicks and rescales the example."""
    readme = readme_commands()
    printed = printed_commands(quickstart.next_steps(e2e, example.data, "kafka"))
    assert any(line.startswith("make results") for line in readme) and "make results" in " ".join(printed)
    assert all("-n " in line for line in readme + printed if line.startswith(("kubectl", "headrace"))), "namespaces"
    before = len(example.input.counted())

    out = run_as_a_newcomer(printed, newcomer_home, e2e.kafka_bootstrap)
    assert "windowed-counts" in out.split("$ kubectl get sapp", 1)[1], out
    assert "the newest 5 one-minute windows" in out and "views" in out, out
    assert "produced 10 chunks of 120 clicks to topic clicks" in out, out

    out = run_as_a_newcomer(readme, newcomer_home, e2e.kafka_bootstrap)
    assert "windowed-counts" in out.split("$ headrace status", 1)[1], out
    assert "the newest 5 one-minute windows" in out, out
    versions = subprocess.run(["bash", "-c", "command -v kubectl headrace uv"], env={"PATH": SYSTEM_PATH},
                              capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    assert versions == [str(tools.tool_dir() / name) for name in ("kubectl", "headrace", "uv")], versions
    topic = scenario.ClickTopic(e2e.kafka_bootstrap, quickstart.TOPIC).resume()
    assert topic.first >= before + 20 * scenario.EVENTS_PER_FILE, "make clicks ran twice: 2 x 10 chunks produced"
    example.wait(lambda: example.app()["spec"]["executor"]["instances"] == 2, 30, "the scale to 2 executors")

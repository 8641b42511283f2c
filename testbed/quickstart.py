"""`headrace dev quickstart`: one command from a fresh machine to an example app doing real work.

Owns: the order of the quick start: the background cluster up, images built from the Dockerfile and
imported, the operator installed by its Helm chart, and the windowed-counts example applied in
namespace `demo`, reading click events from the cluster's Kafka (``kafka.kafka.svc:9092``, topic
`clicks`, fed by a producer on this machine), or with ``--source files`` from a directory of click files.
Also the example in a namespace (and topic) of its own, as the chaos run and the lifecycle bench deploy it
(`example_app`). Never: configures components itself (cluster, images, environment and scenario modules do).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

from testbed import REPOSITORY, cluster, images, objectstore, scenario, tools
from testbed.controlplane import delete_namespace
from testbed.environment import Environment

NAMESPACE = "demo"
TOPIC = "clicks"
SOURCES = ("kafka", "files")


def main(argv: Sequence[str] | None = None) -> int:
    """Bring everything up; print what to try next."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--source", choices=SOURCES, default="kafka", help="where the example reads clicks from")
    parser.add_argument(
        "--files", type=int, default=30, help="chunks of 120 clicks to produce to the topic (or write as files)"
    )
    args = parser.parse_args(argv)
    print("1/4 cluster: building Kubernetes from source on the first run, then starting it", flush=True)
    if cluster.command_up() != 0:
        return 1
    for line in tools.link(["kubectl"]):  # the kubectl the printed steps call, of the cluster's version
        print(f"tools: {line}", flush=True)
    print("2/4 images: building the operator and Spark images from the Dockerfile", flush=True)
    archives = images.build_all()
    if cluster.command_import(list(archives.values())) != 0:
        return 1
    print("3/4 operator: helm install from charts/headrace", flush=True)
    target = Environment(cluster.kubeconfig_path(), scenario.pod_data_root("quickstart"), cluster.kafka_bootstrap())
    target.install_operator()
    print(f"4/4 example: windowed-counts in namespace {NAMESPACE}, reading from {args.source}", flush=True)
    data, _ = apply_example(target, args.files, source=args.source)
    print(next_steps(target, data, args.source), flush=True)
    return 0


def apply_example(
    target: Environment,
    files: int,
    *,
    source: str = "kafka",
    namespace: str = NAMESPACE,
    topic: str = TOPIC,
    bucket: bool = True,
    **spec_overrides: Any,
) -> tuple[Path, scenario.ClickFiles | scenario.ClickTopic]:
    """Step 4, also run by the quick start's and the chaos suite's e2e tests: the example applied in `namespace`
    (spec_overrides merged into its spec), `files` chunks of clicks produced to `topic` (`source` kafka) or written
    as input files (`source` files); returns the example's data directory and the clicks' writer. Its state is in
    the cluster's S3 bucket, or with `bucket` False on the hostPath beside its output (`use_bucket`)."""
    if source not in SOURCES:
        raise ValueError(f"--source must be one of {', '.join(SOURCES)}, not {source!r}")
    namespace_manifest = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    data = scenario.prepare_data_dir(target.data_root, namespace)
    with target.api_client() as api:
        applied_before = scenario.app_exists(api, namespace)
    if not applied_before and scenario.clear_directory(data / "output"):
        # an earlier quick start's output, whose checkpoints went with its cluster: the new app's runtime would
        # refuse to start on it (SinkAhead), since Spark would skip the batch ids its sink log already has
        print(f"cleared the output of an earlier quick start from {data / 'output'}", flush=True)
    clicks: scenario.ClickFiles | scenario.ClickTopic
    if source == "kafka":
        if not target.kafka_bootstrap:
            raise RuntimeError("the cluster has no Kafka reachable from this machine; use --source files")
        clicks = scenario.ClickTopic(target.kafka_bootstrap, topic).resume()
        manifest = scenario.windowed_counts_manifest(data, topic, **spec_overrides)
    else:
        clicks = scenario.ClickFiles(data / "input")
        clicks.files = len(list((data / "input").glob("part-*.json")))
        manifest = scenario.windowed_counts_manifest(data, **spec_overrides)
    (data / "namespace.yaml").write_text(yaml.safe_dump(namespace_manifest))
    target.kubectl("apply", "-f", str(data / "namespace.yaml"))
    if bucket:
        use_bucket(target, data, manifest, namespace)
    (data / "streamingapp.yaml").write_text(yaml.safe_dump(manifest))
    target.kubectl("apply", "-n", namespace, "-f", str(data / "streamingapp.yaml"))
    for _ in range(files):
        clicks.next_file()
    return data, clicks


@contextlib.contextmanager
def example_app(
    target: Environment,
    files: int,
    prefix: str,
    *,
    source: str = "kafka",
    bucket: bool = True,
    **spec_overrides: Any,
) -> Iterator[scenario.AppHandle]:
    """The quick start's example (`apply_example`) in a namespace of its own named `prefix`-<random>, reading a
    topic of that name (`source` kafka), `files` chunks of clicks in it; the handle's `input` is its producer. The
    namespace is deleted afterwards."""
    namespace = f"{prefix}-{uuid.uuid4().hex[:6]}"
    with target.api_client() as api:
        try:
            data, clicks = apply_example(
                target, files, source=source, namespace=namespace, topic=namespace, bucket=bucket, **spec_overrides
            )
            handle = scenario.AppHandle(api, namespace, data)
            handle.input = clicks
            yield handle
        finally:
            delete_namespace(api, namespace)


def use_bucket(target: Environment, data: Path, manifest: dict[str, Any], namespace: str = NAMESPACE) -> None:
    """Checkpoints and savepoints in the cluster's S3 bucket (``s3a://headrace/demo/...``, credentials from the
    Secret copied into the namespace), as on any multi-node cluster; ``data/state`` on this machine shows them.
    A cluster without the testbed's S3 server keeps them on the node (``allowNodeLocal``)."""
    with target.api_client() as api:
        storage = objectstore.storage_for(api, namespace)
    if storage is None:
        return
    state_spec = manifest["spec"]["state"]
    manifest["spec"]["state"] = {**storage.state, "backend": state_spec.get("backend", "rocksdb")}
    if "partitions" in state_spec:
        manifest["spec"]["state"]["partitions"] = state_spec["partitions"]
    state = data / "state"
    bucket_state = storage.host_path(storage.state["checkpointDir"])
    if state.is_symlink():
        state.unlink()
    elif state.is_dir() and not any(state.iterdir()):
        state.rmdir()
    if not state.exists():
        state.symlink_to(bucket_state, target_is_directory=True)


def next_steps(target: Environment, data: Path, source: str) -> str:
    """What to try next: commands that work as written in a new shell of this machine, run from the checkout
    (`make setup` linked `uv`, `headrace` and the quick start linked `kubectl` into a directory on PATH,
    `testbed.tools`); tests/e2e/test_quickstart.py runs every indented command line as printed."""
    feed = f"topic {TOPIC} on kafka.kafka.svc:9092" if source == "kafka" else f"files in {data / 'input'}"
    return f"""
Headrace is running. Try, in a new shell, from {REPOSITORY}:
  export KUBECONFIG={target.kubeconfig}
  kubectl get sapp -n {NAMESPACE}                 # phase, executors, last batch, last savepoint
  kubectl get pods -n {NAMESPACE}                 # the driver and its executors
  headrace status -n {NAMESPACE}
  headrace savepoint windowed-counts -n {NAMESPACE}
  kubectl scale sapp windowed-counts -n {NAMESPACE} --replicas=2
  make clicks                            # ten more chunks of 120 clicks
  make results                           # the newest windows in the example's sink
Input: {feed}
Output (parquet, exactly once): {data / "output"}
State (checkpoints and savepoints): {_state_location(data)}
Stop everything: make down
"""


def _state_location(data: Path) -> str:
    state = data / "state"
    if state.is_symlink():
        return f"bucket headrace on the cluster's S3 server (s3.s3.svc:9000), files in {state.resolve()}"
    return str(state)


if __name__ == "__main__":
    sys.exit(main())

"""`headrace dev quickstart`: one command from a fresh machine to an example app doing real work.

Owns: the order of the quick start: the background cluster up, images built from the Dockerfile and
imported, the operator installed by its Helm chart, and the windowed-counts example applied in
namespace `demo`, reading click files from a directory on this machine that it keeps filling.
Never: configures components itself (cluster, images, environment and scenario modules do).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml

from testbed import cluster, images, scenario
from testbed.environment import Environment

NAMESPACE = "demo"


def main(argv: Sequence[str] | None = None) -> int:
    """Bring everything up; print what to try next."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=30, help="click files to write for the example")
    args = parser.parse_args(argv)
    print("1/4 cluster: building Kubernetes from source on the first run, then starting it", flush=True)
    if cluster.command_up() != 0:
        return 1
    print("2/4 images: building the operator and Spark images from the Dockerfile", flush=True)
    archives = images.build_all()
    if cluster.command_import(list(archives.values())) != 0:
        return 1
    print("3/4 operator: helm install from charts/headrace", flush=True)
    target = Environment(cluster.kubeconfig_path(), scenario.pod_data_root("quickstart"))
    target.install_operator()
    print(f"4/4 example: windowed-counts in namespace {NAMESPACE}", flush=True)
    data = apply_example(target, args.files)
    _print_next_steps(target, data)
    return 0


def apply_example(target: Environment, files: int) -> Path:
    """Step 4, also run by the quick start's e2e test: the example applied in NAMESPACE, `files` input
    files written; returns the example's data directory."""
    namespace_manifest = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    data = scenario.prepare_data_dir(target.data_root, NAMESPACE)
    (data / "namespace.yaml").write_text(yaml.safe_dump(namespace_manifest))
    (data / "streamingapp.yaml").write_text(yaml.safe_dump(scenario.windowed_counts_manifest(data)))
    target.kubectl("apply", "-f", str(data / "namespace.yaml"))
    target.kubectl("apply", "-n", NAMESPACE, "-f", str(data / "streamingapp.yaml"))
    clicks = scenario.ClickFiles(data / "input")
    clicks.files = len(list((data / "input").glob("part-*.json")))
    for _ in range(files):
        clicks.next_file()
    return data


def _print_next_steps(target: Environment, data: Path) -> None:
    print(
        f"""
Headrace is running. Try:
  export KUBECONFIG={target.kubeconfig}
  kubectl get sapp -n {NAMESPACE}              # phase, executors, last batch, last savepoint
  kubectl get pods -n {NAMESPACE}              # the driver and its executors
  uv run headrace status -n {NAMESPACE}
  uv run headrace savepoint windowed-counts -n {NAMESPACE}
  kubectl scale sapp windowed-counts -n {NAMESPACE} --replicas=2
Input files: {data / "input"} (add more with `make quickstart, or uv run python -m testbed quickstart --files 10`)
Output (parquet, exactly once): {data / "output"}
Stop everything: make down
""",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())

"""The `headrace` command: run the operator, generate CRDs, and operate apps (status, savepoint, rescale...)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from headrace import cli_apps
from headrace.api import crd

# Relative to the working directory: run `headrace crds` from a checkout (the Makefile does).
DEFAULT_CRD_DIRECTORIES = (Path("crds"), Path("charts/headrace/crds"))


def _crds(args: argparse.Namespace) -> int:
    directories = [Path(item) for item in args.output or DEFAULT_CRD_DIRECTORIES]
    if args.check:
        stale = [
            str(directory / name)
            for directory in directories
            for name, manifest in crd.all_crds().items()
            if not (directory / name).exists() or (directory / name).read_text() != crd.render_yaml(manifest)
        ]
        if stale:
            print(f"CRDs out of date: {', '.join(stale)}; run `headrace crds`", file=sys.stderr)
            return 1
        return 0
    for directory in directories:
        directory.mkdir(parents=True, exist_ok=True)
        for name, manifest in crd.all_crds().items():
            (directory / name).write_text(crd.render_yaml(manifest))
            print(directory / name)
    return 0


def _operator(args: argparse.Namespace) -> int:
    import kopf
    import prometheus_client

    from headrace import handlers
    from headrace.adapters.lease import LeaseClient
    from headrace.controller import leader
    from headrace.controller.metrics import OperatorMetrics
    from headrace.controller.workqueue import WorkQueue
    from headrace.settings import OperatorSettings

    settings = OperatorSettings.from_environ(os.environ)
    kopf.configure(verbose=args.verbose)
    metrics = OperatorMetrics(prometheus_client.REGISTRY)
    if settings.metrics_port:
        prometheus_client.start_http_server(settings.metrics_port)

    memo = kopf.Memo(metrics=metrics)

    def run() -> bool:
        """Run the operator until it stops; True once no reconcile runs any more."""
        kopf.run(
            clusterwide=not settings.namespaces,
            namespaces=settings.namespaces,
            standalone=True,
            liveness_endpoint=f"http://0.0.0.0:{settings.health_port}/healthz" if settings.health_port else None,
            memo=memo,
        )
        queue = memo.get("queue")  # set by handlers.startup; its cleanup stopped it
        return not isinstance(queue, WorkQueue) or queue.wait_idle(leader.RECONCILES_DONE_SECONDS)

    if not settings.leader_election or settings.lease_namespace is None:  # (election needs a namespace: see settings)
        metrics.leader.set(1)
        run()
        return 0
    leases = LeaseClient(
        handlers.api_client(),
        settings.lease_namespace,
        settings.lease_name,
        timeout_seconds=settings.renew_deadline_seconds / 2,
    )
    elector = leader.LeaderElector(leases, leader.ElectionConfig.from_settings(settings), metrics.leader)
    leader.run_elected(elector, settings.health_port, run)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `headrace` command."""
    parser = argparse.ArgumentParser(prog="headrace", description="Stateful stream processing on Spark, on Kubernetes.")
    commands = parser.add_subparsers(dest="command", required=True)
    operator = commands.add_parser("operator", help="run the operator (also `python -m headrace`)")
    operator.add_argument("--verbose", action="store_true")
    operator.set_defaults(func=_operator)
    crds = commands.add_parser("crds", help="generate the CRDs from the models")
    crds.add_argument("--output", action="append", help="directory (repeatable); default: crds/ and the chart's")
    crds.add_argument("--check", action="store_true", help="fail if the files differ from the models")
    crds.set_defaults(func=_crds)
    cli_apps.add_commands(commands)
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())

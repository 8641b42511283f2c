"""The `headrace` command for people: generate CRDs, and operate apps (status, events, savepoint, savepoints
list and dispose, suspend, resume, rescale, restart, redeploy, each waiting for its outcome with `--wait`; logs;
the Spark UI through a port-forward) from any kubeconfig, in its context's namespace unless `-n` names one;
`-o json|yaml` prints the objects instead of a table.

Owns: turning a command into the same Kubernetes API call a person would make with kubectl (spec
patches, the scale subresource, a StreamingSavepoint), and printing the answer.
Never: decides anything the operator decides; it only asks through the resources. The operator
process itself is wired in `headrace.app` (`headrace operator` runs it too).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from kubernetes.client.exceptions import ApiException

from headrace.adapters.connect import api_client, current_namespace
from headrace.adapters.kube import KubeClient
from headrace.api import crd, models, names
from headrace.api import runtime_contract as contract
from headrace.render.manifests import DRIVER_CONTAINER, EXECUTOR_CONTAINER
from headrace.render.savepoints import savepoint_resource

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
    from headrace import app

    return app.main(["--verbose"] if args.verbose else [])


def _client(args: argparse.Namespace) -> KubeClient:
    if args.namespace is None:
        args.namespace = current_namespace(args.kubeconfig, args.context)
    return KubeClient(api_client(args.kubeconfig, args.context), component="headrace-cli")


def _age(stamp: str | None, now: datetime) -> str:
    if not stamp:
        return "-"
    seconds = int((now - datetime.fromisoformat(stamp.replace("Z", "+00:00"))).total_seconds())
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m")):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def status_rows(apps: list[dict[str, Any]], now: datetime) -> list[list[str]]:
    """One row per app: namespace, name, phase, run/attempt, executors, last batch age, last savepoint age, problem."""
    rows = []
    for app in apps:
        status = app.get("status") or {}
        run = status.get("run") or {}
        progress = status.get("progress") or {}
        savepoint = status.get("latestSavepoint") or {}
        rows.append(
            [
                app["metadata"]["namespace"],
                app["metadata"]["name"],
                status.get("phase") or "-",
                f"r{run['number']}/a{run['attempt']}" if run else "-",
                str(status.get("executors", "-")),
                _age(progress.get("lastBatchTime"), now),
                _age(savepoint.get("time"), now),
                status.get("error") or (status.get("restarts") or {}).get("lastFailureReason") or "",
            ]
        )
    return rows


def _print_table(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(row[index]) for row in [header, *rows]) for index in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def print_objects(objects: list[dict[str, Any]], output: str, *, single: bool) -> None:
    """Objects as JSON or YAML (`-o`): one object as itself, several as a List, as kubectl prints them."""
    document: Any = (
        objects[0] if single and len(objects) == 1 else {"apiVersion": "v1", "kind": "List", "items": objects}
    )
    if output == "json":
        print(json.dumps(document, indent=2, sort_keys=True))
    else:
        print(yaml.safe_dump(document, sort_keys=True), end="")


def command_status(args: argparse.Namespace) -> int:
    """`headrace status [APP] [-o json|yaml]`."""
    kube = _client(args)
    if args.app:
        app = kube.get_app(args.namespace, args.app)
        if app is None:
            print(f"no StreamingApp {args.namespace}/{args.app}", file=sys.stderr)
            return 1
        apps = [app]
    else:
        apps = kube.list_apps(None if args.all_namespaces else args.namespace)
    if args.output:
        print_objects(apps, args.output, single=bool(args.app))
        return 0
    header = ["NAMESPACE", "NAME", "PHASE", "RUN", "EXECUTORS", "LAST BATCH", "LAST SAVEPOINT", "PROBLEM"]
    _print_table(header, status_rows(apps, datetime.now(UTC)))
    return 0


def command_savepoint(args: argparse.Namespace) -> int:
    """`headrace savepoint APP`: create a StreamingSavepoint and (by default) wait for its outcome."""
    kube = _client(args)
    name = args.name or names.savepoint_name(args.app, "manual", datetime.now(UTC))
    kube.create_savepoint(
        args.namespace, savepoint_resource(args.namespace, args.app, name, "manual", operator_made=False)
    )
    print(f"streamingsavepoint/{name} created")
    if args.no_wait:
        return 0
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        status = (kube.get_savepoint(args.namespace, name) or {}).get("status") or {}
        if status.get("phase") == "Succeeded":
            print(f"savepoint {name}: {status.get('path')} (batch {status.get('batchId')})")
            return 0
        if status.get("phase") == "Failed":
            print(f"savepoint {name} failed: {status.get('message')}", file=sys.stderr)
            return 1
        time.sleep(1)
    print(f"savepoint {name} not finished after {args.timeout}s", file=sys.stderr)
    return 1


def event_rows(events: list[dict[str, Any]], now: datetime) -> list[list[str]]:
    """Events oldest first: last seen, type, reason, count, message (its first line)."""

    def seen(event: dict[str, Any]) -> str:
        return str(event.get("lastTimestamp") or event.get("eventTime") or event["metadata"].get("creationTimestamp"))

    return [
        [
            _age(seen(event), now),
            event.get("type") or "",
            event.get("reason") or "",
            str(event.get("count") or 1),
            (event.get("message") or "").split("\n", 1)[0],
        ]
        for event in sorted(events, key=seen)
    ]


def command_events(args: argparse.Namespace) -> int:
    """`headrace events APP`: the app's events, oldest first (with `--savepoints`, its StreamingSavepoints' too)."""
    kube = _client(args)
    kinds = {models.APP_KIND} | ({models.SAVEPOINT_KIND} if args.savepoints else set())
    listed = kube.to_dict(kube.core.list_namespaced_event(args.namespace))
    mine = {args.app} | (
        {item["metadata"]["name"] for item in _savepoints_of(kube, args.namespace, args.app)}
        if args.savepoints
        else set()
    )
    events = [
        event
        for event in listed.get("items") or []
        if (event.get("involvedObject") or {}).get("kind") in kinds
        and (event.get("involvedObject") or {}).get("name") in mine
    ]
    if args.output:
        print_objects(events, args.output, single=False)
        return 0
    _print_table(["LAST SEEN", "TYPE", "REASON", "COUNT", "MESSAGE"], event_rows(events, datetime.now(UTC)))
    return 0


def _savepoints_of(kube: KubeClient, namespace: str, app: str | None) -> list[dict[str, Any]]:
    items, _ = kube.list_objects("savepoint", namespace)
    return [item for item in items if app is None or (item.get("spec") or {}).get("appName") == app]


def savepoint_rows(savepoints: list[dict[str, Any]], now: datetime) -> list[list[str]]:
    """Newest first: name, app, reason, phase, batch, age, path (or why it failed), whether its files go with it."""

    def taken(item: dict[str, Any]) -> str:
        return str((item.get("status") or {}).get("time") or item["metadata"].get("creationTimestamp") or "")

    rows = []
    for item in sorted(savepoints, key=taken, reverse=True):
        spec, status = item.get("spec") or {}, item.get("status") or {}
        batch = status.get("batchId")
        rows.append(
            [
                item["metadata"]["name"],
                spec.get("appName") or "",
                spec.get("reason") or "",
                status.get("phase") or "Pending",
                "-" if batch is None else str(batch),
                _age(taken(item) or None, now),
                "yes" if spec.get("disposeOnDelete") else "no",
                status.get("path") or status.get("message") or spec.get("path") or "",
            ]
        )
    return rows


def command_savepoints(args: argparse.Namespace) -> int:
    """`headrace savepoints list [APP]` and `headrace savepoints dispose NAME...`."""
    kube = _client(args)
    if args.action == "list":
        savepoints = _savepoints_of(kube, args.namespace, args.app)
        if args.output:
            print_objects(savepoints, args.output, single=False)
            return 0
        header = ["NAME", "APP", "REASON", "PHASE", "BATCH", "AGE", "DISPOSE", "PATH"]
        _print_table(header, savepoint_rows(savepoints, datetime.now(UTC)))
        return 0
    return _dispose(args, kube)


def _dispose(args: argparse.Namespace, kube: KubeClient) -> int:
    """Delete StreamingSavepoints; their files too (disposeOnDelete set first) unless --keep-files."""
    failed = [name for name in args.names if not _dispose_one(args, kube, name)]
    return 1 if failed else 0


def _dispose_one(args: argparse.Namespace, kube: KubeClient, name: str) -> bool:
    item = kube.get_savepoint(args.namespace, name)
    if item is None:
        print(f"no StreamingSavepoint {args.namespace}/{name}", file=sys.stderr)
        return False
    if not args.keep_files and not (item.get("spec") or {}).get("disposeOnDelete"):
        kube.custom.patch_namespaced_custom_object(
            models.GROUP,
            models.VERSION,
            args.namespace,
            models.SAVEPOINT_PLURAL,
            name,
            {"spec": {"disposeOnDelete": True}},
        )
        if not _wait_until(args.timeout, lambda: _guarded(kube, args.namespace, name)):
            print(f"streamingsavepoint/{name}: the operator did not take charge of its files", file=sys.stderr)
            return False
    kube.delete_savepoint(args.namespace, name)
    print(f"streamingsavepoint/{name} deleted" + ("" if args.keep_files else " (its files with it)"))
    if args.wait and not _wait_until(args.timeout, lambda: kube.get_savepoint(args.namespace, name) is None):
        print(f"streamingsavepoint/{name}: still there after {args.timeout:g}s", file=sys.stderr)
        return False
    return True


def _guarded(kube: KubeClient, namespace: str, name: str) -> bool:
    """The operator put its disposal finalizer on the StreamingSavepoint (its deletion now deletes the files)."""
    item = kube.get_savepoint(namespace, name) or {}
    return names.DISPOSE_FINALIZER in (item.get("metadata", {}).get("finalizers") or [])


def _wait_until(timeout: float, check: Any) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(1)
    return False


def command_restart(args: argparse.Namespace) -> int:
    """`headrace restart APP`: bump spec.restartNonce (a new driver from the latest checkpoint)."""
    kube = _client(args)
    app = _get(kube, args)
    if app is None:
        return 1
    nonce = int((app.get("spec") or {}).get("restartNonce") or 0) + 1
    kube.patch_app_spec(args.namespace, args.app, {"restartNonce": nonce})
    print(f"streamingapp/{args.app}: restartNonce={nonce}")
    return _wait_for(args, kube, "restart", since=app) if args.wait else 0


def redeploy_patch(spec: dict[str, Any], savepoint: str | None, path: str | None, repartition: bool) -> dict[str, Any]:
    """The spec merge patch of `headrace redeploy`: restoreFrom replaced as a whole, redeployNonce bumped."""
    source: dict[str, Any] = {"savepoint": savepoint, "path": path, "allowRepartition": repartition or None}
    return {"restoreFrom": source, "redeployNonce": int(spec.get("redeployNonce") or 0) + 1}


def command_redeploy(args: argparse.Namespace) -> int:
    """`headrace redeploy APP --savepoint NAME | --path URI`: a new run from that savepoint (spec.redeployNonce)."""
    kube = _client(args)
    app = _get(kube, args)
    if app is None:
        return 1
    patch = redeploy_patch(app.get("spec") or {}, args.savepoint, args.path, args.allow_repartition)
    kube.patch_app_spec(args.namespace, args.app, patch)
    print(f"streamingapp/{args.app}: redeployNonce={patch['redeployNonce']} from {args.savepoint or args.path}")
    return _wait_for(args, kube, "redeploy", since=app) if args.wait else 0


def _get(kube: KubeClient, args: argparse.Namespace) -> dict[str, Any] | None:
    app = kube.get_app(args.namespace, args.app)
    if app is None:
        print(f"no StreamingApp {args.namespace}/{args.app}", file=sys.stderr)
    return app


def _condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((item for item in status.get("conditions") or [] if item.get("type") == type_), {})


def outcome(
    verb: str, app: dict[str, Any], executors: int | None = None, since: dict[str, Any] | None = None
) -> tuple[bool, str | None]:
    """Whether `verb` (suspend, resume, rescale, restart, redeploy) has taken effect on `app`, and why it cannot
    (None: not yet, or done): the operator observed the spec's generation, then the phase (or the executors) show
    it; a restart or redeploy runs another attempt or run than the app did `since`."""
    status = app.get("status") or {}
    if (status.get("observedGeneration") or 0) < (app.get("metadata", {}).get("generation") or 0):
        return False, None
    phase = status.get("phase")
    if phase == "Failed":
        return False, f"the app is Failed: {_condition(status, 'Degraded').get('message') or status.get('error')}"
    if verb == "redeploy" and _condition(status, "Degraded").get("reason") == "RedeployRefused":
        return False, f"redeploy refused: {status.get('error')}"
    running = phase == "Running" and _condition(status, "Ready").get("status") == "True"
    if verb in ("restart", "redeploy"):
        before = ((since or {}).get("status") or {}).get("run") or {}
        run = status.get("run") or {}
        key = "number" if verb == "redeploy" else "driverPod"
        return running and "pendingOperation" not in status and run.get(key) != before.get(key), None
    done = {"suspend": phase == "Suspended", "resume": running}.get(verb)
    if done is not None:
        return done, None
    registered = (status.get("progress") or {}).get("registeredExecutors")
    return status.get("executors") == executors and registered in (None, executors), None


def _wait_for(
    args: argparse.Namespace,
    kube: KubeClient,
    verb: str,
    executors: int | None = None,
    since: dict[str, Any] | None = None,
) -> int:
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        app = kube.get_app(args.namespace, args.app)
        if app is None:
            print(f"no StreamingApp {args.namespace}/{args.app}", file=sys.stderr)
            return 1
        done, problem = outcome(verb, app, executors, since)
        if problem is not None:
            print(f"streamingapp/{args.app}: {problem}", file=sys.stderr)
            return 1
        if done:
            print(f"streamingapp/{args.app}: {(app.get('status') or {}).get('phase')}")
            return 0
        time.sleep(1)
    print(f"streamingapp/{args.app}: {verb} not done after {args.timeout:g}s", file=sys.stderr)
    return 1


def command_job_state(args: argparse.Namespace) -> int:
    """`headrace suspend APP` / `headrace resume APP` (`--wait`: until Suspended / Running and Ready)."""
    state = "suspended" if args.command == "suspend" else "running"
    kube = _client(args)
    kube.patch_app_spec(args.namespace, args.app, {"job": {"state": state}})
    print(f"streamingapp/{args.app}: job.state={state}")
    return _wait_for(args, kube, args.command) if args.wait else 0


def command_rescale(args: argparse.Namespace) -> int:
    """`headrace rescale APP N` (`--wait`: until that many executors are registered)."""
    kube = _client(args)
    kube.scale_app(args.namespace, args.app, args.executors)
    print(f"streamingapp/{args.app} scaled to {args.executors} executors")
    return _wait_for(args, kube, "rescale", args.executors) if args.wait else 0


def log_source(app: dict[str, Any], previous: bool, executor: int | None = None) -> tuple[str | None, str, str]:
    """The pod whose log `headrace logs` shows (None: none to show), its container, and what to say about it: the
    current attempt's driver (or its executor `executor`), or with `previous` the attempt before's driver (in the
    same run; once that pod is gone, `kept_log` reads the copy the operator kept)."""
    status = app.get("status") or {}
    run = status.get("run") or {}
    if not run:
        return None, DRIVER_CONTAINER, "no driver has been started yet"
    if executor is not None:
        prefix = names.executor_prefix(app["metadata"]["name"], run["number"], run["attempt"])
        about = f"executor {executor} of run {run['number']}, attempt {run['attempt']}"
        return f"{prefix}-exec-{executor}", EXECUTOR_CONTAINER, about
    if not previous:
        return str(run["driverPod"]), DRIVER_CONTAINER, f"run {run['number']}, attempt {run['attempt']}"
    if run["attempt"] <= 1:
        return None, DRIVER_CONTAINER, f"run {run['number']} has had one attempt only"
    restarts = status.get("restarts") or {}
    last = f"{restarts.get('lastFailureReason')}: {restarts.get('lastFailureMessage')}"
    attempt = run["attempt"] - 1
    return (
        names.driver_pod(app["metadata"]["name"], run["number"], attempt),
        DRIVER_CONTAINER,
        (f"run {run['number']}, attempt {attempt}; its failure as recorded: {last}"),
    )


def kept_log(kube: KubeClient, namespace: str, app: str) -> tuple[str, str] | None:
    """The log tail the operator kept of the app's last driver that ended (its ConfigMap `<app>-driver-log`), and
    what to say about it; None when none was kept."""
    try:
        data = kube.core.read_namespaced_config_map(names.driver_log(app), namespace).data or {}
    except ApiException as error:
        if error.status == 404:
            return None
        raise
    about = f"driver {data.get('pod')}, which ended; the last {len(data.get('log', ''))} characters of its log, kept "
    return data.get("log", ""), about + f"at {data.get('savedAt')}"


def _stream(kube: KubeClient, pod: str, namespace: str, container: str) -> None:
    response: Any = kube.core.read_namespaced_pod_log(
        pod, namespace, container=container, follow=True, _preload_content=False
    )
    for chunk in response.stream():
        sys.stdout.write(chunk.decode(errors="replace"))


def command_logs(args: argparse.Namespace) -> int:
    """`headrace logs APP [--previous] [-f] [--executor N]`: the driver's log (or an executor's); with --previous
    the driver that ended before the current one: its pod while it exists, else the tail the operator kept."""
    if args.previous and args.executor is not None:
        print("--previous is for drivers: executor pods are deleted when they end", file=sys.stderr)
        return 2
    kube = _client(args)
    app = kube.get_app(args.namespace, args.app)
    if app is None:
        print(f"no StreamingApp {args.namespace}/{args.app}", file=sys.stderr)
        return 1
    pod, container, about = log_source(app, args.previous, args.executor)
    try:
        if pod is not None and args.follow and not args.previous:
            print(f"# {about}", file=sys.stderr)
            _stream(kube, pod, args.namespace, container)
            return 0
        text = kube.core.read_namespaced_pod_log(pod, args.namespace, container=container) if pod else None
    except ApiException as error:
        if error.status != 404:
            raise
        text = None
        about = f"{about}: pod {pod} is gone"
    if text is None and args.previous:
        kept = kept_log(kube, args.namespace, args.app)
        if kept is not None:
            text, about = kept
    print(f"# {about}", file=sys.stderr)
    if text is None:
        return 1
    sys.stdout.write(text)
    return 0


def ui_selector(app: str) -> str:
    """The label selector of the app's UI Service: its driver that runs the queries."""
    return f"{names.APP}={app},{names.ROLE}={names.ROLE_DRIVER},{names.WRITER}=true"


def port_forward_command(args: argparse.Namespace, kubectl: str, pod: str) -> list[str]:
    """The kubectl command that forwards the local port to the Spark UI port of `pod` (the UI Service's driver)."""
    command = [kubectl, "port-forward", "-n", args.namespace, f"pod/{pod}"]
    command += [f"{args.port}:{contract.SPARK_UI_PORT}", "--address", args.address]
    for flag, value in (("--kubeconfig", args.kubeconfig), ("--context", args.context)):
        if value:
            command += [flag, value]
    return command


def _ui_driver(kube: KubeClient, namespace: str, app: str) -> str | None:
    """The running driver the app's UI Service selects now (None: none, e.g. while a driver starts)."""
    pods: list[Any] = kube.core.list_namespaced_pod(namespace, label_selector=ui_selector(app)).items
    live = [pod.metadata.name for pod in pods if pod.status.phase == "Running" and not pod.metadata.deletion_timestamp]
    return str(live[0]) if live else None


def command_ui(args: argparse.Namespace) -> int:
    """`headrace ui APP`: forward a local port to the app's Spark UI and print its URL, until interrupted. It forwards
    to the driver the app's UI Service `<app>-ui` selects, and again to the next one when that driver goes (a
    restart: the Service's name stays, its driver changes), checking every `--retry` seconds."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        print("headrace ui runs `kubectl port-forward`: put kubectl on PATH", file=sys.stderr)
        return 1
    kube = _client(args)
    print(f"Spark UI of {args.namespace}/{args.app}: http://{args.address}:{args.port}/ (Ctrl-C stops)", flush=True)
    forward: subprocess.Popen[bytes] | None = None
    try:
        while True:
            if kube.get_app(args.namespace, args.app) is None:
                print(f"no StreamingApp {args.namespace}/{args.app}", file=sys.stderr)
                return 1
            driver = _ui_driver(kube, args.namespace, args.app)
            if driver is None:
                print("# no driver serves the UI now (starting or restarting): waiting", file=sys.stderr, flush=True)
            else:
                print(f"# forwarding to {driver}", file=sys.stderr, flush=True)
                forward = subprocess.Popen(port_forward_command(args, kubectl, driver))
                while forward.poll() is None and _ui_driver(kube, args.namespace, args.app) == driver:
                    time.sleep(args.retry)
                forward.terminate()
                forward.wait()
            time.sleep(args.retry)
    except KeyboardInterrupt:
        return 0
    finally:
        if forward is not None and forward.poll() is None:
            forward.terminate()
            forward.wait()


def _add_app_commands(commands: Any) -> None:
    """Register the commands that operate apps."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-n", "--namespace", default=None, help="default: the kubeconfig context's namespace")
    common.add_argument("--kubeconfig", default=None)
    common.add_argument("--context", default=None)
    output = argparse.ArgumentParser(add_help=False)
    output.add_argument("-o", "--output", choices=("json", "yaml"), default=None, help="the objects, not a table")
    status = commands.add_parser("status", parents=[common, output], help="phase, run, executors, last batch of apps")
    status.add_argument("app", nargs="?")
    status.add_argument("-A", "--all-namespaces", action="store_true")
    status.set_defaults(func=command_status)
    savepoint = commands.add_parser("savepoint", parents=[common], help="take a savepoint now")
    savepoint.add_argument("app")
    savepoint.add_argument("--name", default=None, help="name of the StreamingSavepoint")
    savepoint.add_argument("--no-wait", action="store_true")
    savepoint.add_argument("--timeout", type=float, default=600.0)
    savepoint.set_defaults(func=command_savepoint)
    waiting = argparse.ArgumentParser(add_help=False)
    waiting.add_argument("--wait", action="store_true", help="wait until the operator has done it")
    waiting.add_argument("--timeout", type=float, default=600.0, help="seconds --wait waits")
    for verb, text in (("suspend", "take a savepoint and remove the driver"), ("resume", "restore and run again")):
        parser = commands.add_parser(verb, parents=[common, waiting], help=text)
        parser.add_argument("app")
        parser.set_defaults(func=command_job_state)
    _add_steering_commands(commands, common, waiting, output)
    rescale = commands.add_parser("rescale", parents=[common, waiting], help="change the number of executors")
    rescale.add_argument("app")
    rescale.add_argument("executors", type=int)
    rescale.set_defaults(func=command_rescale)
    logs = commands.add_parser("logs", parents=[common], help="the driver's log (--previous: the one that ended)")
    logs.add_argument("app")
    logs.add_argument(
        "--previous", action="store_true", help="the driver that ended before the current one (its kept log tail)"
    )
    logs.add_argument("-f", "--follow", action="store_true")
    logs.add_argument("--executor", type=int, default=None, metavar="N", help="executor N of the current attempt")
    logs.set_defaults(func=command_logs)
    ui = commands.add_parser("ui", parents=[common], help="forward a local port to the app's Spark UI, print its URL")
    ui.add_argument("app")
    ui.add_argument("--port", type=int, default=contract.SPARK_UI_PORT, help="local port (default 4040)")
    ui.add_argument("--address", default="127.0.0.1", help="local address to listen on")
    ui.add_argument("--retry", type=float, default=2.0, help="seconds between forwards when the driver changes")
    ui.set_defaults(func=command_ui)


def _add_steering_commands(commands: Any, common: Any, waiting: Any, output: Any) -> None:
    """Register events, savepoints list/dispose, restart and redeploy."""
    events = commands.add_parser("events", parents=[common, output], help="the app's events, oldest first")
    events.add_argument("app")
    events.add_argument("--savepoints", action="store_true", help="with its StreamingSavepoints' events")
    events.set_defaults(func=command_events)
    savepoints = commands.add_parser("savepoints", help="list or dispose of StreamingSavepoints")
    actions = savepoints.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", parents=[common, output], help="savepoints, newest first")
    listing.add_argument("app", nargs="?", help="only this app's")
    listing.set_defaults(func=command_savepoints)
    dispose = actions.add_parser("dispose", parents=[common, waiting], help="delete savepoints and their files")
    dispose.add_argument("names", nargs="+", metavar="NAME")
    dispose.add_argument("--keep-files", action="store_true", help="delete only the StreamingSavepoint")
    dispose.set_defaults(func=command_savepoints)
    restart = commands.add_parser("restart", parents=[common, waiting], help="a new driver from the latest checkpoint")
    restart.add_argument("app")
    restart.set_defaults(func=command_restart)
    redeploy = commands.add_parser("redeploy", parents=[common, waiting], help="a new run from a chosen savepoint")
    redeploy.add_argument("app")
    source = redeploy.add_mutually_exclusive_group(required=True)
    source.add_argument("--savepoint", help="a StreamingSavepoint of the app's namespace")
    source.add_argument("--path", help="a savepoint directory URI")
    redeploy.add_argument("--allow-repartition", action="store_true", help="restoreFrom.allowRepartition")
    redeploy.set_defaults(func=command_redeploy)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `headrace` command."""
    parser = argparse.ArgumentParser(prog="headrace", description="Stateful stream processing on Spark, on Kubernetes.")
    commands = parser.add_subparsers(dest="command", required=True)
    operator = commands.add_parser("operator", help="run the operator (the same as `python -m headrace`)")
    operator.add_argument("--verbose", action="store_true")
    operator.set_defaults(func=_operator)
    crds = commands.add_parser("crds", help="generate the CRDs from the models")
    crds.add_argument("--output", action="append", help="directory (repeatable); default: crds/ and the chart's")
    crds.add_argument("--check", action="store_true", help="fail if the files differ from the models")
    crds.set_defaults(func=_crds)
    _add_app_commands(commands)
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())

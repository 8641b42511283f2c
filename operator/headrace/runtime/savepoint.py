"""Savepoints: the committed prefix of every query's checkpoint, copied while the queries run.

Owns: copying the files :func:`checkpoint_files.select_committed_prefix` selects through Hadoop's
FileSystem API, the savepoint metadata file (written last: a savepoint without it is incomplete),
reading a savepoint's metadata back, for a stopped job checking before and after the copy that
every query's offsets, commits and file-sink logs end at the batch it records (else no savepoint),
and disposing of one savepoint directory (a direct child of this app's savepoint root only).
Never: pauses, stops or restarts a query (stop-with-savepoint stops them before calling here).
"""

from __future__ import annotations

import io
import json
import logging
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from py4j.protocol import Py4JError  # type: ignore[import-untyped]

from headrace.api.runtime_contract import SAVEPOINT_METADATA_FILE
from headrace.runtime.checkpoint_files import (
    IncompleteCheckpointError,
    SelectedFile,
    StatefulOperator,
    boundary_problem,
    keep_referenced_ssts,
    last_batch_id,
    last_committed_batch,
    operator_from_metadata,
    operator_metadata_paths,
    partitions_from_offsets,
    referenced_sst_files,
    select_committed_prefix,
    snapshot_archives,
)
from headrace.runtime.hadoop_fs import HadoopFileSystem, MissingFileError, join

FORMAT_VERSION = 1
log = logging.getLogger(__name__)


class SavepointError(RuntimeError):
    """A savepoint could not be taken or read."""


@dataclass(frozen=True)
class SavepointSource:
    """One query to include: where its checkpoint is and how to describe it."""

    key: str
    checkpoint: str
    query_id: str
    name: str | None
    sink_path: str | None


@dataclass(frozen=True)
class SavepointContext:
    """The facts about the job a savepoint records."""

    app_name: str
    app_namespace: str
    run_id: str
    spark_version: str
    state_backend: str
    reason: str
    stopped: bool  # taken after stop-with-savepoint (offsets == commits)


def default_path(savepoint_dir: str, app_name: str, now: datetime) -> str:
    """``<savepoint_dir>/<app>-<UTC time>``, unique per millisecond."""
    return join(savepoint_dir, f"{app_name}-{now.strftime('%Y%m%dT%H%M%S')}{now.microsecond // 1000:03d}Z")


def _snapshot_references(
    fs: HadoopFileSystem, checkpoint: str, selection: list[SelectedFile]
) -> dict[str, set[str] | None]:
    """Per store with a RocksDB snapshot, the SST files it references (None if unreadable)."""
    references: dict[str, set[str] | None] = {}
    for store, archives in snapshot_archives(selection).items():
        try:
            references[store] = set().union(*(_archive_references(fs, join(checkpoint, path)) for path in archives))
        except (KeyError, ValueError, zipfile.BadZipFile) as error:
            log.warning("%s: cannot read SST references (%s); copying every SST file", store, error)
            references[store] = None
    return references


def _archive_references(fs: HadoopFileSystem, archive: str) -> set[str]:
    with zipfile.ZipFile(io.BytesIO(fs.read_bytes(archive))) as snapshot:
        return referenced_sst_files(snapshot.read("metadata").decode("utf-8"))


def checkpoint_operators(fs: HadoopFileSystem, checkpoint: str, files: dict[str, int]) -> list[StatefulOperator]:
    """The stateful operators a query's checkpoint recorded (`files`: its listing), from their metadata files."""
    found = [operator_from_metadata(fs.read_text(join(checkpoint, path))) for path in operator_metadata_paths(files)]
    return [operator for operator in found if operator is not None]


def _copy_query(fs: HadoopFileSystem, source: SavepointSource, target: str) -> dict[str, Any]:
    files = fs.list_files(source.checkpoint)
    batch = last_committed_batch(files)
    if batch is None:
        return {"key": source.key, "id": source.query_id, "name": source.name, "batchId": None, "files": 0, "bytes": 0}
    partitions = partitions_from_offsets(fs.read_text(join(source.checkpoint, "offsets", str(batch))))
    try:
        selection = select_committed_prefix(files, batch, partitions)
    except IncompleteCheckpointError as error:
        raise SavepointError(f"query {source.key}: {error}") from None
    selection = keep_referenced_ssts(selection, _snapshot_references(fs, source.checkpoint, selection))
    missing = set(fs.copy_files(source.checkpoint, join(target, source.key), [item.path for item in selection]))
    vanished_required = sorted(item.path for item in selection if item.required and item.path in missing)
    if vanished_required:
        raise SavepointError(f"{vanished_required} vanished from {source.checkpoint} while copying")
    copied = [item.path for item in selection if item.path not in missing]
    size = sum(files.get(path, 0) for path in copied)
    operators = checkpoint_operators(fs, source.checkpoint, files)
    return {
        "key": source.key,
        "id": source.query_id,
        "name": source.name,
        "batchId": batch,
        "statePartitions": partitions,
        "operators": [operator.to_json() for operator in operators],
        "sinkPath": source.sink_path,
        "files": len(copied),
        "bytes": size,
    }


def stopped_boundary(fs: HadoopFileSystem, source: SavepointSource) -> int | None:
    """The batch a stopped query ends at; :class:`SavepointError` unless its logs all end there."""
    planned = last_batch_id(fs.list_names(join(source.checkpoint, "offsets")))
    committed = last_batch_id(fs.list_names(join(source.checkpoint, "commits")))
    sink = last_batch_id(fs.list_names(join(source.sink_path, "_spark_metadata"))) if source.sink_path else None
    problem = boundary_problem(planned, committed, sink)
    if problem:
        raise SavepointError(f"query {source.key} did not stop at a batch boundary: {problem}")
    return committed


def _check_unchanged(fs: HadoopFileSystem, sources: list[SavepointSource], queries: list[dict[str, Any]]) -> None:
    """After copying a stopped job: every query still ends at the batch the savepoint records."""
    for source, query in zip(sources, queries, strict=True):
        after = stopped_boundary(fs, source)
        if after != query["batchId"]:
            raise SavepointError(
                f"query {source.key} ran batch {after} while the savepoint copied batch {query['batchId']}"
            )


def take_savepoint(
    fs: HadoopFileSystem,
    sources: list[SavepointSource],
    target: str,
    context: SavepointContext,
    now: Callable[[], datetime],
) -> dict[str, Any]:
    """Copy each query's committed prefix to ``target/<query key>`` and write the metadata file.

    With ``context.stopped`` every query must end at one batch boundary before and after the
    copy; otherwise the partial copy is deleted and :class:`SavepointError` raised.
    Returns the savepoint record (the metadata plus ``path``).
    """
    if fs.exists(join(target, SAVEPOINT_METADATA_FILE)):
        raise SavepointError(f"a savepoint already exists at {target}")
    created_here = not fs.exists(target)
    started, started_at = time.monotonic(), now()
    try:
        if context.stopped:
            for source in sources:
                stopped_boundary(fs, source)
        queries = [_copy_query(fs, source, target) for source in sources]
        if context.stopped:
            _check_unchanged(fs, sources, queries)
    except SavepointError:
        if created_here:
            fs.delete(target)
        raise
    record = {
        "formatVersion": FORMAT_VERSION,
        "path": fs.qualify(target),
        "app": {"name": context.app_name, "namespace": context.app_namespace, "runId": context.run_id},
        "reason": context.reason,
        "stopped": context.stopped,
        "sparkVersion": context.spark_version,
        "stateBackend": context.state_backend,
        "startedAt": started_at.isoformat(),
        "completedAt": now().isoformat(),
        "durationSeconds": round(time.monotonic() - started, 3),
        "sizeBytes": sum(query["bytes"] for query in queries),
        "queries": queries,
    }
    fs.write_text(join(target, SAVEPOINT_METADATA_FILE), json.dumps(record, indent=2, sort_keys=True), overwrite=False)
    return record


def read_savepoint(fs: HadoopFileSystem, path: str) -> dict[str, Any]:
    """A savepoint's metadata; :class:`SavepointError` if it is missing or unreadable."""
    try:
        text = fs.read_text(join(path, SAVEPOINT_METADATA_FILE))
    except MissingFileError:
        raise SavepointError(f"{path} is not a complete savepoint: {SAVEPOINT_METADATA_FILE} is missing") from None
    record: dict[str, Any] = json.loads(text)
    if record.get("formatVersion") != FORMAT_VERSION:
        raise SavepointError(f"{path} has savepoint format {record.get('formatVersion')}, expected {FORMAT_VERSION}")
    return record


def dispose_savepoint(fs: HadoopFileSystem, savepoint_root: str | None, path: str) -> dict[str, Any]:
    """Delete the savepoint directory `path`, which must be a direct child of `savepoint_root` (this app's
    `<savepointDir>/<namespace>/<app>/`): compared as the file system qualifies both (scheme, bucket or host,
    normalised path), so `..`, another bucket or another scheme never reach a delete. Deleting a directory
    that is already gone succeeds (``deleted`` false). :class:`SavepointError` names a refused path."""
    if not savepoint_root:
        raise SavepointError("HEADRACE_SAVEPOINT_DIR is not set: this driver deletes no savepoint")
    raw_name = path.rstrip("/").rpartition("/")[2]
    if any(segment in (".", "..") for segment in path.split("/")) or raw_name in ("", ".", "..") or "\\" in path:
        raise SavepointError(f"{path!r} is not a savepoint directory name under {savepoint_root}")
    root = fs.qualify(savepoint_root).rstrip("/")
    scheme = urlsplit(path).scheme
    if scheme and scheme.lower() != urlsplit(root).scheme.lower():  # never opens another file system
        raise SavepointError(f"{path!r} is not on the file system of this app's savepoint root {root}")
    try:
        qualified = fs.qualify(path).rstrip("/")
    except Py4JError as error:
        raise SavepointError(f"{path!r} cannot be resolved: {error}") from None
    parent, _, name = qualified.rpartition("/")
    if parent != root or name != raw_name:
        raise SavepointError(f"{path!r} is not directly under this app's savepoint root {root}")
    existed = fs.exists(qualified)
    if existed:
        fs.delete(qualified)
    log.info("savepoint %s %s", qualified, "deleted" if existed else "was already gone")
    return {"path": qualified, "deleted": existed}

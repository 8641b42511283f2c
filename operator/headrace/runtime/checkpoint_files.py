"""Pure knowledge of a Structured Streaming checkpoint's layout.

Owns: which files of a live checkpoint form its committed prefix at batch N (the savepoint
selection), the last committed batch, whether a stopped query's logs end at one batch boundary,
the state partitions pinned in the offsets log and the stateful operators recorded in
``state/<op>/_metadata``.
Never: touches a file system; callers list and read files and pass paths and text in.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

RESTORE_MARKER = "_headrace_restored.json"
_VERSIONED_STATE_FILE = re.compile(r"^(\d+)(?:_[0-9A-Za-z-]+)?\.(zip|changelog|delta|snapshot)$")
_SNAPSHOT_KINDS = ("zip", "snapshot")
_STATE_METADATA_DIRS = ("_metadata", "_stateSchema")
_LOG_DIRS = ("offsets", "commits")


@dataclass(frozen=True)
class SelectedFile:
    """A checkpoint file to copy; ``required`` files must exist, others may vanish while copying."""

    path: str
    required: bool


@dataclass(frozen=True)
class StatefulOperator:
    """One stateful operator as the checkpoint records it."""

    operator_id: int
    name: str
    partitions: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.operator_id, "name": self.name, "partitions": self.partitions}


def _batch_number(name: str) -> int | None:
    """The batch id of a metadata log file (``7`` or ``9.compact``), else None."""
    stem = name.removesuffix(".compact")
    return int(stem) if stem.isdigit() else None


def _hidden(path: str) -> bool:
    return any(part.startswith(".") for part in path.split("/"))


def last_batch_id(names: Iterable[str]) -> int | None:
    """The highest batch id among a metadata log directory's file names (``7``, ``9.compact``)."""
    numbers = [number for number in (_batch_number(name) for name in names) if number is not None]
    return max(numbers, default=None)


def behind_problem(key: str, checkpoint: str, expected: int, committed: int | None) -> str | None:
    """Why a query must not start: its checkpoint's commits end before the batch earlier attempts of the same
    run committed (another volume or path, a wiped or older copy). None when it is level or ahead."""
    if committed is not None and committed >= expected:
        return None
    found = "no commits" if committed is None else f"commits up to batch {committed}"
    return (
        f"query {key}: the checkpoint {checkpoint} has {found}, but earlier attempts of this run committed batch "
        f"{expected}; starting would rewind state and offsets"
    )


def sink_beyond_checkpoint_problem(
    key: str, sink: str, checkpoint: str, planned: int | None, sink_batch: int | None
) -> str | None:
    """Why a query must not start: its file sink's log holds batches beyond the last one its checkpoint planned.

    Spark's file sink skips, without running them, the batches its ``_spark_metadata`` log already has, so a
    checkpoint that never planned those batches (a new checkpoint against an old output path, a checkpoint since
    wiped, two apps sharing an output) would lose them silently. A sink log at or behind the offsets log is
    normal: a driver that died after the sink logged batch N and before it committed N replays N, and Spark skips
    it exactly once. None when the sink is not ahead."""
    if sink_batch is None or (planned is not None and sink_batch <= planned):
        return None
    found = "has planned no batch" if planned is None else f"planned batches only up to {planned}"
    return (
        f"query {key}: the file sink {sink} already logged batches up to {sink_batch} in its _spark_metadata, "
        f"but the checkpoint {checkpoint} {found}: that output was written under another checkpoint (an earlier "
        f"app or run with the same output path, or this run's checkpoint since wiped), and Spark would skip batches "
        f"0..{sink_batch} of this one without writing them"
    )


def boundary_problem(planned: int | None, committed: int | None, sink: int | None) -> str | None:
    """Why a stopped query's logs do not end at one batch boundary; None when they do.

    ``planned``, ``committed`` and ``sink`` are the last batch ids of the offsets log, the commits
    log and the file sink's ``_spark_metadata`` log (None: empty, or no file sink). A sink log
    behind the commits is harmless (Spark writes the next batch); one ahead of them is not.
    """
    if planned != committed:
        return f"the offsets log ends at batch {planned} but the commits log at {committed}"
    if sink is not None and (committed is None or sink > committed):
        return f"the file sink's log has batch {sink} after the last committed batch {committed}"
    return None


SINK_LOG_VERSION = "v1"  # the first line of every file-sink log file


def is_compaction_batch(batch: int, compact_interval: int) -> bool:
    """Whether Spark's file-sink log writes `batch` as a compaction (`<batch>.compact`: every file so far)."""
    return (batch + 1) % compact_interval == 0


def sink_log_filler(
    batch: int, compact_interval: int, names: Iterable[str], read: Callable[[str], str]
) -> tuple[str, str]:
    """The file-sink log entry recording that `batch` added no files, as (file name, content), given the log's
    file names and a reader of them. A plain batch's is an empty `<batch>`; a compaction batch's is
    `<batch>.compact` listing every file the log holds so far (the newest earlier compaction's entries, then those
    of each plain entry after it): an empty one would hide all earlier output from readers of the sink, and a plain
    `<batch>` in its place fails the next compaction (BATCH_METADATA_NOT_FOUND)."""
    if not is_compaction_batch(batch, compact_interval):
        return str(batch), SINK_LOG_VERSION
    present = set(names)
    earlier = [b for b in range(batch) if is_compaction_batch(b, compact_interval) and f"{b}.compact" in present]
    first = earlier[-1] if earlier else None
    sources = [f"{first}.compact"] if first is not None else []
    sources += [str(b) for b in range(0 if first is None else first + 1, batch) if str(b) in present]
    lines = [line for name in sources for line in read(name).splitlines()[1:] if line.strip()]
    return f"{batch}.compact", "\n".join([SINK_LOG_VERSION, *lines])


def sink_log_seed(last_batch: int, compact_interval: int) -> list[str]:
    """Empty file-sink log entries that let a new output directory start after ``last_batch``.

    Spark's sink log compacts every ``compact_interval`` batches and needs the newest compaction
    file plus every later entry, so: the newest compaction batch at or below ``last_batch`` (as
    ``<id>.compact``) and the plain entries after it.
    """
    compactions = [batch for batch in range(last_batch + 1) if is_compaction_batch(batch, compact_interval)]
    first = compactions[-1] if compactions else 0
    return [f"{batch}.compact" if batch in compactions else str(batch) for batch in range(first, last_batch + 1)]


def committed_batches(paths: Iterable[str]) -> list[int]:
    """Batch ids present in the ``commits`` log, ascending."""
    batches = []
    for path in paths:
        parts = path.split("/")
        if len(parts) == 2 and parts[0] == "commits" and parts[1].isdigit():
            batches.append(int(parts[1]))
    return sorted(batches)


def last_committed_batch(paths: Iterable[str]) -> int | None:
    """The newest committed batch id, or None before the first commit."""
    batches = committed_batches(paths)
    return batches[-1] if batches else None


def _select_log_file(parts: list[str], batch: int) -> SelectedFile | None:
    """An ``offsets`` or ``commits`` entry up to ``batch`` (the last two are required: a restart reads them)."""
    number = _batch_number(parts[-1])
    if number is None or number > batch:
        return None
    return SelectedFile("/".join(parts), required=number >= batch - 1)


def _select_state_versions(files: list[tuple[str, int, str]], version: int) -> list[SelectedFile]:
    """Newest snapshot at or below ``version`` plus every later changelog or delta up to it."""
    snapshots = [number for _, number, kind in files if kind in _SNAPSHOT_KINDS and number <= version]
    base = max(snapshots, default=0)
    selected = []
    for path, number, kind in files:
        is_base_snapshot = kind in _SNAPSHOT_KINDS and number == base
        is_later_change = kind not in _SNAPSHOT_KINDS and base < number <= version
        if is_base_snapshot or is_later_change:
            selected.append(SelectedFile(path, required=True))
    return selected


def _missing_versions(files: list[tuple[str, int, str]], version: int) -> list[int]:
    """Versions after the newest snapshot (at or below ``version``) that have no changelog or delta."""
    snapshots = [number for _, number, kind in files if kind in _SNAPSHOT_KINDS and number <= version]
    base = max(snapshots, default=0)
    changes = {number for _, number, kind in files if kind not in _SNAPSHOT_KINDS}
    return [number for number in range(base + 1, version + 1) if number not in changes]


def _select_state_file(parts: list[str], batch: int) -> SelectedFile | None:
    """State files that are not versioned store files (metadata, schemas, SST files)."""
    if any(part in _STATE_METADATA_DIRS for part in parts):
        number = _batch_number(parts[-1])
        if number is not None and number > batch:
            return None
        return SelectedFile("/".join(parts), required=True)
    # RocksDB SST files are immutable and shared by versions; copy those present, some may be
    # deleted by maintenance once no retained version references them.
    return SelectedFile("/".join(parts), required=False)


def _stale_partition(parts: list[str], partitions: int | None) -> bool:
    """Whether ``state/<operator>/<partition>/...`` is a partition the checkpoint no longer has."""
    return partitions is not None and len(parts) > 3 and parts[2].isdigit() and int(parts[2]) >= partitions


class IncompleteCheckpointError(ValueError):
    """The checkpoint lacks state files that its commits log says exist."""


def select_committed_prefix(paths: Iterable[str], batch: int, partitions: int | None = None) -> list[SelectedFile]:
    """The files that restore a checkpoint exactly at committed batch ``batch``.

    ``paths`` are relative to the query's checkpoint root, ``/``-separated. State store version
    ``batch + 1`` is the state after batch ``batch``. Every entry of the sources' own logs
    (``sources/<n>/``) is kept: they are numbered by each source's offsets, not by batch ids. A file
    source's entry ``L`` lists the files up to its log offset ``L``, and its log runs ahead of the batch
    ids for good once a driver died after the source logged its next files and before the offsets log
    recorded that batch (the next driver keeps that entry and logs the newly arrived files after it):
    cut at ``batch``, the copy lost the entries the committed offsets name and every start of the
    restored query failed (``batch <L> doesn't exist``). Entries after the committed offsets are what
    Spark keeps on a restart too: the next batch reads them. Raises :class:`IncompleteCheckpointError`
    when a state store lacks a version it needs (such a checkpoint cannot be restored).
    ``partitions``: the state partitions at ``batch`` (its offset log's); the directories of partitions at or
    above it are left out, stale: a repartition to fewer partitions leaves them behind, with no versions after it.
    """
    selected: list[SelectedFile] = []
    store_files: dict[str, list[tuple[str, int, str]]] = defaultdict(list)
    for path in sorted(paths):
        parts = path.split("/")
        if _hidden(path) or parts[-1] == RESTORE_MARKER:
            continue
        if parts[0] in _LOG_DIRS:
            choice = _select_log_file(parts, batch)
        elif parts[0] == "sources":
            choice = SelectedFile(path, required=False)  # numbered by the source's own offsets: see the docstring
        elif parts[0] == "state":
            if _stale_partition(parts, partitions):
                continue
            match = _VERSIONED_STATE_FILE.match(parts[-1])
            if match and "SSTs" not in parts:
                store_files["/".join(parts[:-1])].append((path, int(match.group(1)), match.group(2)))
                continue
            choice = _select_state_file(parts, batch)
        else:
            choice = SelectedFile(path, required=path == "metadata")
        if choice is not None:
            selected.append(choice)
    for store, files in sorted(store_files.items()):
        missing = _missing_versions(files, batch + 1)
        if missing:
            raise IncompleteCheckpointError(f"{store} has no state file for versions {missing} (batch {batch})")
        selected.extend(_select_state_versions(files, batch + 1))
    return sorted(selected, key=lambda selected_file: selected_file.path)


def snapshot_archives(selection: Iterable[SelectedFile]) -> dict[str, list[str]]:
    """The RocksDB snapshot archives chosen per state store directory (several with format v2 ids)."""
    archives: dict[str, list[str]] = defaultdict(list)
    for selected in selection:
        directory, _, name = selected.path.rpartition("/")
        match = _VERSIONED_STATE_FILE.match(name)
        if directory.startswith("state/") and match and match.group(2) == "zip":
            archives[directory].append(selected.path)
    return dict(archives)


def referenced_sst_files(snapshot_metadata: str) -> set[str]:
    """The SST file names (in ``SSTs/``) a RocksDB snapshot's ``metadata`` entry references."""
    for document in _log_entry_json(snapshot_metadata):
        if "sstFiles" in document:
            return {str(item["dfsSstFileName"]) for item in document["sstFiles"]}
    raise ValueError("no sstFiles in the RocksDB snapshot metadata")


def keep_referenced_ssts(selection: list[SelectedFile], referenced: dict[str, set[str] | None]) -> list[SelectedFile]:
    """Keep only the SST files the chosen snapshots reference, now required.

    ``referenced`` maps a store directory to its snapshot's SST names; a store absent from it has
    no snapshot (replay from empty: no SST needed); ``None`` means unknown (keep all, optional).
    """
    kept = []
    for selected in selection:
        directory, _, name = selected.path.rpartition("/")
        store, _, leaf = directory.rpartition("/")
        if leaf != "SSTs" or not directory.startswith("state/") or (store in referenced and referenced[store] is None):
            kept.append(selected)
        elif name in (referenced.get(store) or set()):
            kept.append(SelectedFile(selected.path, required=True))
    return kept


def _log_entry_json(text: str) -> list[dict[str, Any]]:
    """The JSON lines of a versioned Spark metadata log entry (first line is ``v1``)."""
    documents = []
    for line in text.splitlines()[1:]:
        try:
            document = json.loads(line)
        except ValueError:
            continue
        if isinstance(document, dict):
            documents.append(document)
    return documents


def partitions_from_offsets(text: str) -> int | None:
    """``spark.sql.shuffle.partitions`` pinned in an offsets log entry."""
    for document in _log_entry_json(text):
        conf = document.get("conf")
        if isinstance(conf, dict) and "spark.sql.shuffle.partitions" in conf:
            return int(conf["spark.sql.shuffle.partitions"])
    return None


def operator_from_metadata(text: str) -> StatefulOperator | None:
    """The operator recorded in a ``state/<op>/_metadata/metadata`` file (v1 or v2 layout)."""
    for document in _log_entry_json(text):
        info = document.get("operatorInfo")
        if isinstance(info, dict) and "operatorId" in info:
            stores = document.get("stateStoreInfo") or [{}]
            partitions = stores[0].get("numPartitions") if isinstance(stores[0], dict) else None
            return StatefulOperator(int(info["operatorId"]), str(info.get("operatorName", "")), partitions)
    return None


def operator_metadata_paths(paths: Iterable[str]) -> list[str]:
    """The operator metadata files of a checkpoint, one per stateful operator (v1 layout)."""
    found = []
    for path in paths:
        parts = path.split("/")
        if len(parts) == 4 and parts[0] == "state" and parts[2] == "_metadata" and parts[3] == "metadata":
            found.append(path)
    return sorted(found)

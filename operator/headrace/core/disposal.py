"""Disposal of a deleted StreamingSavepoint's files (spec.disposeOnDelete): whether, what and when.

A StreamingSavepoint with disposeOnDelete carries the operator's finalizer, so its deletion waits
for `decide_disposal`:

    nothing was ever written (no path; never taken)            -> Release (nothing left)
    the savepoint is still being taken (InProgress)            -> Retry (until it settles)
    the app is gone, or its path is not this savepoint's own
    directory under the app's savepoint root, or the app
    still needs it (suspended on it, restores from it)         -> Release, files left (Warning Event)
    a running driver of the app                                -> Dispose <savepointDir>/<ns>/<app>/<name>
    no running driver: the app is starting or restarting       -> Retry (it may be back within minutes)
                       Suspended, Failed, Completed            -> Release, files left
    every Retry is bounded: after MAX_TRIES tries or DEADLINE_SECONDS the resource is released with
    the files left, so a deletion never hangs on the operator.

The path is the operator's own (`names.savepoint_dir`), never the text a tenant wrote; the recorded
path must name that same directory (scheme, bucket or host, every segment), and a root or path
with `.`/`..`/empty segments, a query, a fragment or percent-escapes is refused. The driver checks
again that it deletes a direct child of its own savepoint root.
Never: I/O or the clock.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from urllib.parse import urlsplit

from headrace.api import names

MAX_TRIES = 8  # calls to the driver (and waits for one) before the files are left
DEADLINE_SECONDS = 600.0  # the longest a deletion waits for disposal
FIRST_RETRY_SECONDS = 5.0
MAX_RETRY_SECONDS = 60.0
WAITING_PHASES = frozenset({None, "Deploying", "Restarting", "Upgrading", "Savepointing", "Rescaling", "Running"})
FILE_LIKE = frozenset({"file", "hdfs"})  # schemes whose recorded path may qualify an empty authority


@dataclass(frozen=True)
class AppFacts:
    """What disposal needs to know of the savepoint's app."""

    savepoint_root: str | None  # spec.state.savepointDir
    phase: str | None
    driver_address: str | None  # a running, answering-capable driver of the app (None: none runs)
    needed_paths: frozenset[str] = frozenset()  # savepoints the app still restores from
    needed_names: frozenset[str] = frozenset()  # StreamingSavepoints the app still refers to


@dataclass(frozen=True)
class DisposalFacts:
    """A StreamingSavepoint being deleted with disposeOnDelete, its app, and the tries so far."""

    namespace: str
    name: str
    app_name: str
    phase: str | None
    path: str | None  # status.path: where the savepoint was (being) written
    app: AppFacts | None  # None: the app does not exist
    tries: int = 0  # earlier attempts of this deletion
    waited_seconds: float = 0.0  # since the first attempt
    last_error: str | None = None  # why the previous call to the driver failed


@dataclass(frozen=True)
class Dispose:
    """Ask the driver at `address` to delete the directory `path`."""

    address: str
    path: str


@dataclass(frozen=True)
class Retry:
    """Decide again in `seconds` (the deletion waits)."""

    seconds: float
    why: str


@dataclass(frozen=True)
class Release:
    """Let the deletion finish; `left` is the directory whose files stay (None: nothing to delete)."""

    why: str
    left: str | None = None


Disposal = Dispose | Retry | Release


def decide_disposal(facts: DisposalFacts) -> Disposal:  # noqa: PLR0911 - one per row of the module's table
    """What to do now for a StreamingSavepoint being deleted with disposeOnDelete (see the module's table)."""
    if facts.path is None:
        if facts.phase == "InProgress":
            return _retry(facts, "the savepoint is still being taken", left=None)
        return Release("the savepoint was never written: nothing to delete")
    if facts.app is None:
        return Release(f"StreamingApp {facts.app_name!r} does not exist: no driver to delete with", left=facts.path)
    target, problem = disposal_target(facts.app.savepoint_root, facts.namespace, facts.app_name, facts.name, facts.path)
    if target is None:
        return Release(f"not deleted: {problem}", left=facts.path)
    if facts.path in facts.app.needed_paths or facts.name in facts.app.needed_names:
        return Release(f"not deleted: StreamingApp {facts.app_name!r} still restores from it", left=facts.path)
    if facts.phase == "InProgress":
        return _retry(facts, "the savepoint is still being taken", left=facts.path)
    if facts.app.driver_address is not None:
        if _exhausted(facts):
            return Release(_given_up(facts), left=facts.path)
        return Dispose(address=facts.app.driver_address, path=target)
    if facts.app.phase in WAITING_PHASES:
        return _retry(facts, f"no running driver of {facts.app_name!r} yet (phase {facts.app.phase})", left=facts.path)
    return Release(
        f"no running driver of {facts.app_name!r} (phase {facts.app.phase}) to delete with; the files are deleted "
        "only through the app's driver, which has the storage credentials",
        left=facts.path,
    )


def after_failed_call(facts: DisposalFacts, error: str, *, refused: bool) -> Retry | Release:
    """The driver did not delete the files: try again later (bounded), or leave them when it refused the path
    (its own check) or does not know the call (an older runtime)."""
    if refused:
        return Release(f"the driver refused to delete it: {error}", left=facts.path)
    failed = replace(facts, tries=facts.tries + 1, last_error=error)
    return _retry(failed, f"deleting failed: {error}", left=facts.path)


def _exhausted(facts: DisposalFacts) -> bool:
    return facts.tries >= MAX_TRIES or facts.waited_seconds >= DEADLINE_SECONDS


def _given_up(facts: DisposalFacts) -> str:
    last = f"; last error: {facts.last_error}" if facts.last_error else ""
    return f"gave up after {facts.tries} tries in {facts.waited_seconds:.0f}s{last}"


def _retry(facts: DisposalFacts, why: str, *, left: str | None) -> Retry | Release:
    if _exhausted(facts):
        return Release(f"{why}; {_given_up(facts)}", left=left)
    return Retry(min(FIRST_RETRY_SECONDS * 2**facts.tries, MAX_RETRY_SECONDS), why)


def disposal_target(
    root: str | None, namespace: str, app: str, name: str, recorded: str
) -> tuple[str | None, str | None]:
    """The directory to delete (the savepoint's own under the app's root), or (None, why not)."""
    if not root:
        return None, "the app has no spec.state.savepointDir"
    target = names.savepoint_dir(root, namespace, app, name)
    wanted, problem = _parts(target, "spec.state.savepointDir")
    if wanted is None:
        return None, problem
    found, problem = _parts(recorded, "the savepoint's recorded path")
    if found is None:
        return None, problem
    scheme, authority, segments = wanted
    found_scheme, found_authority, found_segments = found
    same_authority = found_authority == authority or (not authority and scheme in FILE_LIKE)
    if (found_scheme, found_segments) != (scheme, segments) or not same_authority:
        return None, f"{recorded} is not this savepoint's directory {target} (spec.state.savepointDir changed?)"
    return target, None


def _parts(uri: str, what: str) -> tuple[tuple[str, str, tuple[str, ...]] | None, str | None]:
    """(scheme, authority, path segments) of a URI or plain path, refusing anything ambiguous."""
    split = urlsplit(uri)
    if split.query or split.fragment or "?" in uri or "#" in uri or "%" in uri or "\\" in uri:
        return None, f"{what} {uri!r} has a query, fragment, escape or backslash"
    segments = tuple(split.path.rstrip("/").split("/")[1:]) if split.path.startswith("/") else None
    if not segments or any(segment in ("", ".", "..") for segment in segments):
        return None, f"{what} {uri!r} is not an absolute path without empty, . or .. segments"
    return ((split.scheme or "file").lower(), split.netloc.lower(), segments), None

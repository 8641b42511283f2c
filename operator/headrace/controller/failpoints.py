"""Failpoints: crash the operator on purpose at a named step, to test that it resumes (like etcd's gofail).

`HEADRACE_FAILPOINTS` (comma-separated names; off when unset) is read once. When execution reaches
an armed point the process writes one line to stderr and leaves with `os._exit(FAILPOINT_EXIT_CODE)`:
a hard crash like SIGKILL (no cleanup, no further status write, no finally blocks).

Points (the reconciler calls `hit` or `around`):
- `after-status:<Kind>/<Step>`: the status whose pendingOperation is Kind/Step (the write-ahead log
  entry) was written; no action of that plan ran yet.
- `before:<Action>` / `after:<Action>`: around carrying out an action, by its class name. For
  `TakeSavepoint` they surround the call to the driver: before it, the StreamingSavepoint is
  already InProgress; after it, the driver answered but the outcome is not recorded yet.
- `inside:EnsureDriver/<step>`: between the objects of one attempt, after the control `Secret`, after
  `pruned` (a later attempt removed the objects of earlier ones) and after each created object by its
  kind (`ServiceAccount`, `Role`, `RoleBinding`, `ConfigMap`, `Service`, `Pod`).

Owns: parsing the variable and crashing. Never: anything else; unarmed, `hit` is a set lookup.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache

ENV = "HEADRACE_FAILPOINTS"
FAILPOINT_EXIT_CODE = 97


def parse(text: str) -> frozenset[str]:
    """The armed point names in the variable's value (blank items are ignored)."""
    return frozenset(item.strip() for item in text.split(",") if item.strip())


@cache
def armed() -> frozenset[str]:
    """The points armed in this process (the environment is read once)."""
    return parse(os.environ.get(ENV, ""))


def hit(name: str) -> None:
    """Crash here if `name` is armed."""
    if name in armed():
        os.write(2, f"headrace failpoint {name} hit: exiting with code {FAILPOINT_EXIT_CODE}\n".encode())
        os._exit(FAILPOINT_EXIT_CODE)


@contextmanager
def around(action: str) -> Iterator[None]:
    """`before:<action>`, the body, then `after:<action>` (not reached when the body raises)."""
    hit(f"before:{action}")
    yield
    hit(f"after:{action}")

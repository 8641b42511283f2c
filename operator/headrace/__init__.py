"""Headrace: Flink-grade stateful stream processing on Apache Spark, run by a Kubernetes operator.

Layers (each package's docstring says what it owns; import-linter enforces the direction):
``api`` (resource models and contracts) < ``core`` (pure decisions) < ``render`` (pure manifests) <
``adapters`` (I/O) < ``controller`` (observe, decide, record, act) < ``handlers`` (kopf glue) <
``app`` (the operator process, wired once) < ``cli`` (the ``headrace`` command).
``runtime`` is the agent inside the Spark driver. The local cluster for tests lives outside the package,
in the top-level ``testbed`` (never shipped).
"""

__version__ = "0.1.0"

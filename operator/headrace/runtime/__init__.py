"""The agent inside the Spark driver: ``python -m headrace.runtime <script.py> [args]``.

Owns: launching unmodified PySpark Structured Streaming scripts with managed checkpoints
(``launcher``, ``patching``), the Spark configuration only the pod knows (``sparkconf``), the
authenticated control endpoint (``control``), Prometheus metrics and the query listener
(``metrics``, ``listener``, ``progress``), savepoints and restores through Hadoop's FileSystem API
(``checkpoint_files``, ``hadoop_fs``, ``savepoint``, ``restore``, ``restoring``), exit codes and the termination
message (``termination``).
Never: imports kopf, kubernetes or the operator's controller, adapters or handlers; the only
contract with the operator is :mod:`headrace.api.runtime_contract`.
"""

from headrace.runtime.restore import repartition_checkpoint

__all__ = ["repartition_checkpoint"]

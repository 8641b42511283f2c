"""Checks of a StreamingApp spec that the CRD schema cannot express.

Owns: the list of Spark settings the operator owns (and which spec field sets each), and checks
that span the spec. Every problem names the field and the fix.
Never: I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from headrace.api.models import StreamingAppSpec

# Spark settings the operator sets itself: key -> where the user sets it instead.
OWNED_SPARK_CONF: dict[str, str] = {
    "spark.master": "the operator (the driver runs in client mode against this cluster)",
    "spark.submit.deployMode": "the operator (always client mode inside the driver pod)",
    "spark.kubernetes.namespace": "metadata.namespace",
    "spark.kubernetes.container.image": "spec.image",
    "spark.kubernetes.container.image.pullPolicy": "spec.imagePullPolicy",
    "spark.executor.instances": "spec.executor.instances",
    "spark.executor.cores": "spec.executor.cores",
    "spark.executor.memory": "spec.executor.memory",
    "spark.driver.cores": "spec.driver.cores",
    "spark.driver.memory": "spec.driver.memory",
    "spark.sql.shuffle.partitions": "spec.state.partitions",
    "spark.sql.streaming.checkpointLocation": "spec.state.checkpointDir",
    "spark.sql.streaming.stateStore.providerClass": "spec.state.backend",
    "spark.driver.host": "the operator (the driver pod's IP)",
    "spark.driver.bindAddress": "the operator",
    "spark.driver.port": "the operator",
    "spark.blockManager.port": "the operator",
    "spark.kubernetes.driver.pod.name": "the operator (the driver pod owns its executors)",
    "spark.kubernetes.executor.podNamePrefix": "the operator (names are per run and attempt)",
    "spark.kubernetes.executor.podTemplateFile": "spec.executor.podTemplate",
    "spark.kubernetes.authenticate.driver.serviceAccountName": "spec.serviceAccountName",
    "spark.dynamicAllocation.enabled": "spec.executor.instances (Headrace scales executors itself)",
    "spark.jars.packages": "spec.application.packages",
    "spark.submit.pyFiles": "spec.application.pyFiles",
}


@dataclass(frozen=True)
class Problem:
    """One reason a spec cannot be applied."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


def _spark_conf_problems(spec: StreamingAppSpec) -> list[Problem]:
    problems = []
    for key in sorted(spec.sparkConf):
        owner = OWNED_SPARK_CONF.get(key)
        if owner is None:
            continue
        fix = f"set {owner} instead" if owner.startswith("spec.") or owner.startswith("metadata.") else "remove it"
        problems.append(Problem(f'spec.sparkConf["{key}"]', f"{key} is owned by {owner}; {fix}"))
    return problems


def _volume_problems(spec: StreamingAppSpec) -> list[Problem]:
    problems = []
    volume_names = {str(volume.model_extra.get("name")) for volume in spec.volumes if volume.model_extra}
    for index, mount in enumerate(spec.volumeMounts):
        name = (mount.model_extra or {}).get("name")
        if name not in volume_names:
            problems.append(
                Problem(
                    f"spec.volumeMounts[{index}].name",
                    f"no volume named {name!r} in spec.volumes; add it there or fix the name",
                )
            )
    if spec.state.checkpointDir.startswith("file://"):
        path = spec.state.checkpointDir.removeprefix("file://")
        mount_paths = [str((mount.model_extra or {}).get("mountPath", "")) for mount in spec.volumeMounts]
        if not any((mount and path.startswith(mount.rstrip("/") + "/")) or path == mount for mount in mount_paths):
            problems.append(
                Problem(
                    "spec.state.checkpointDir",
                    f"{spec.state.checkpointDir} is not on a volume: checkpoints would die with the pod; mount a "
                    "persistent volume (spec.volumes and spec.volumeMounts) at a parent of this path",
                )
            )
    return problems


def validate_spec(spec: StreamingAppSpec) -> list[Problem]:
    """Everything wrong with a schema-valid spec, in a stable order (empty when it can be applied)."""
    return [*_spark_conf_problems(spec), *_volume_problems(spec)]

"""Resolve Maven artifacts and their runtime dependencies from Maven Central into the testbed cache.

Owns: the generated resolver pom and Maven settings, the machine's `mvn` run that downloads into
``<cache>/maven/repository``, the cached manifest of resolved jars per request, and the rule that
drops jars PySpark already ships in ``pyspark/jars``.
Never: writes inside the repository, or talks to any repository but Maven Central.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from testbed.build import cache_root

MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
DEPENDENCY_PLUGIN_VERSION = "3.8.1"
_MANIFEST = "jars.json"
# A line of `mvn dependency:list -DoutputAbsoluteArtifactFilename=true`:
#   group:artifact:type[:classifier]:version:scope:/abs/path.jar[ -- module name]
_LISTED = re.compile(r"^\s*(?P<coords>[^\s:]+(?::[^\s:]+){4,5}):(?P<path>/\S+\.jar)")


@dataclass(frozen=True)
class Artifact:
    """One resolved jar: its artifact id and where it lies in the local repository."""

    group_id: str
    artifact_id: str
    version: str
    path: Path


def _split(coordinate: str) -> tuple[str, str, str]:
    parts = coordinate.split(":")
    if len(parts) != 3 or not all(parts):
        raise ValueError(f"Maven coordinate must be group:artifact:version, got {coordinate!r}")
    return parts[0], parts[1], parts[2]


def _dependency_xml(coordinate: str) -> str:
    group_id, artifact_id, version = _split(coordinate)
    return (
        f"<dependency><groupId>{group_id}</groupId><artifactId>{artifact_id}</artifactId>"
        f"<version>{version}</version></dependency>"
    )


def resolver_pom(coordinates: Sequence[str], pinned: Sequence[str] = ()) -> str:
    """A pom whose dependencies are `coordinates`; `pinned` coordinates override transitive versions."""
    managed = "".join(_dependency_xml(c) for c in pinned)
    wanted = "".join(_dependency_xml(c) for c in coordinates)
    return f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.testbed</groupId><artifactId>resolver</artifactId><version>0</version>
  <packaging>pom</packaging>
  <dependencyManagement><dependencies>{managed}</dependencies></dependencyManagement>
  <dependencies>{wanted}</dependencies>
  <build><plugins><plugin>
    <groupId>org.apache.maven.plugins</groupId><artifactId>maven-dependency-plugin</artifactId>
    <version>{DEPENDENCY_PLUGIN_VERSION}</version>
  </plugin></plugins></build>
</project>
"""


def mirror_settings() -> str:
    """Maven settings sending every repository (Spark's poms name a GCS mirror) to Maven Central."""
    return (
        "<settings><mirrors><mirror><id>central-only</id><mirrorOf>*</mirrorOf>"
        f"<url>{MAVEN_CENTRAL}</url></mirror></mirrors></settings>\n"
    )


def parse_dependency_list(text: str) -> list[Artifact]:
    """The jars named in the output file of `dependency:list` with absolute file names."""
    artifacts = []
    for line in text.splitlines():
        match = _LISTED.match(line)
        if match:
            fields = match["coords"].split(":")
            artifacts.append(Artifact(fields[0], fields[1], fields[-2], Path(match["path"])))
    return artifacts


def is_shipped(artifact_id: str, shipped_jar_names: Iterable[str]) -> bool:
    """True if a jar named ``<artifact_id>-<version>.jar`` (any version) is among `shipped_jar_names`."""
    prefix = f"{artifact_id}-"
    return any(name.startswith(prefix) and name[len(prefix) : len(prefix) + 1].isdigit() for name in shipped_jar_names)


def without_shipped(artifacts: Sequence[Artifact], shipped_jar_names: Iterable[str]) -> list[Artifact]:
    """`artifacts` minus those PySpark already ships (compared by artifact id, any version)."""
    names = list(shipped_jar_names)
    return [a for a in artifacts if not is_shipped(a.artifact_id, names)]


def pyspark_jar_names() -> list[str]:
    """File names of the jars in the installed ``pyspark/jars``."""
    import pyspark

    return sorted(p.name for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar"))


def _request_key(coordinates: Sequence[str], pinned: Sequence[str], exclude: bool) -> str:
    payload = json.dumps([sorted(coordinates), sorted(pinned), exclude]).encode()
    return hashlib.sha256(payload).hexdigest()[:16]


def _run_maven(workdir: Path, repository: Path) -> str:
    listing = workdir / "dependencies.txt"
    command = [
        "mvn", "-B", "-q", "-s", str(workdir / "settings.xml"), "-f", str(workdir / "pom.xml"),
        f"-Dmaven.repo.local={repository}", "dependency:list", "-DincludeScope=runtime",
        "-DoutputAbsoluteArtifactFilename=true", f"-DoutputFile={listing}",
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        errors = [line for line in result.stdout.splitlines() if "ERROR" in line][:5]
        raise RuntimeError(f"mvn could not resolve the artifacts in {workdir}/pom.xml:\n" + "\n".join(errors))
    return listing.read_text()


def _cached(manifest: Path) -> list[Path] | None:
    if not manifest.exists():
        return None
    paths = [Path(p) for p in json.loads(manifest.read_text())]
    return paths if all(p.exists() for p in paths) else None


def resolve(
    coordinates: Sequence[str],
    exclude_provided_by_spark: bool,
    pinned: Sequence[str] = (),
) -> list[Path]:
    """Jars of `coordinates` and their runtime dependencies, downloaded once into the cache.

    With `exclude_provided_by_spark`, jars whose artifact id PySpark already ships are left out (the
    connector then runs against PySpark's own copies). `pinned` ("group:artifact:version") overrides
    the versions of transitive dependencies.
    """
    pins = list(pinned)
    workdir = cache_root() / "maven" / "requests" / _request_key(coordinates, pins, exclude_provided_by_spark)
    manifest = workdir / _MANIFEST
    cached = _cached(manifest)
    if cached is not None:
        return cached
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "pom.xml").write_text(resolver_pom(coordinates, pins))
    (workdir / "settings.xml").write_text(mirror_settings())
    artifacts = parse_dependency_list(_run_maven(workdir, cache_root() / "maven" / "repository"))
    if exclude_provided_by_spark:
        artifacts = without_shipped(artifacts, pyspark_jar_names())
    paths = [a.path for a in artifacts]
    manifest.write_text(json.dumps([str(p) for p in paths], indent=1))
    return paths


def resolve_pom(pom: Path, exclude_provided_by_spark: bool) -> list[Path]:
    """Jars of the dependencies a pom file declares (with its exclusions and pins), downloaded once into
    the cache; the same rule for jars PySpark ships as `resolve`. Used for the poms the Dockerfile builds from."""
    text = pom.read_text()
    key = hashlib.sha256(json.dumps([text, exclude_provided_by_spark]).encode()).hexdigest()[:16]
    workdir = cache_root() / "maven" / "requests" / f"pom-{key}"
    manifest = workdir / _MANIFEST
    cached = _cached(manifest)
    if cached is not None:
        return cached
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "pom.xml").write_text(text)
    (workdir / "settings.xml").write_text(mirror_settings())
    artifacts = parse_dependency_list(_run_maven(workdir, cache_root() / "maven" / "repository"))
    if exclude_provided_by_spark:
        artifacts = without_shipped(artifacts, pyspark_jar_names())
    paths = [a.path for a in artifacts]
    manifest.write_text(json.dumps([str(p) for p in paths], indent=1))
    return paths


def pinned_jars(pom: Path, checksums: Path) -> list[Path]:
    """`resolve_pom(pom)` without the jars PySpark ships, each checked against `checksums` (``sha256  name`` lines,
    as the image build checks them): any other jar, a missing one or a changed one raises."""
    jars = resolve_pom(pom, exclude_provided_by_spark=True)
    pinned = dict(line.split()[::-1] for line in checksums.read_text().splitlines() if line.strip())
    actual = {jar.name: hashlib.sha256(jar.read_bytes()).hexdigest() for jar in jars}
    if actual != pinned:
        changed = sorted(set(actual.items()) ^ set(pinned.items()))
        raise RuntimeError(f"the jars of {pom} differ from {checksums.name}: {changed[:6]}")
    return jars

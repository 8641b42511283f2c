"""Files through Hadoop's FileSystem API in the driver's JVM, so any Spark-supported store works.

Owns: listing, reading, writing, copying, renaming and deleting files by Hadoop URI (local paths,
PVCs, HDFS, s3a, gs, abfs) through the Py4J gateway of the running SparkContext; copies within one
S3A bucket run server-side (S3 CopyObject through S3A's own client, in parallel), no bytes through the driver, and
so do copies between gs:// paths (batched copy requests through the Cloud Storage connector's own client) and within
one abfs(s):// container of a flat-namespace account (Copy Blob through the ABFS connector's Blob client, in parallel);
copies between local paths (a PVC) are hard links where the volume allows, else native copies.
Never: decides which files matter (see ``checkpoint_files``) or keeps state beyond the gateway.
"""

from __future__ import annotations

import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from py4j.protocol import Py4JError, Py4JJavaError  # type: ignore[import-untyped]

# Parallel CopyObject requests for a copy within one S3 bucket (each is one round trip, no data through us).
SERVER_SIDE_COPY_THREADS = 16
# Objects per call of the Cloud Storage connector's copy (it sends them as batch requests of its own size).
GCS_COPY_CHUNK = 500
# How long a Copy Blob the store reports pending (it copies asynchronously then) may take, and how often it is asked.
AZURE_COPY_WAIT_SECONDS = 300.0
AZURE_COPY_POLL_SECONDS = 0.2


class MissingFileError(FileNotFoundError):
    """A file vanished or never existed."""


def _is_missing(error: Py4JJavaError) -> bool:
    return "FileNotFoundException" in str(error.java_exception.getClass().getName())


def _http_status(error: Py4JJavaError) -> int | None:
    """The HTTP status of an ABFS connector's REST failure (AbfsRestOperationException), else None."""
    try:
        return int(error.java_exception.getStatusCode())
    except (Py4JError, TypeError, ValueError):
        return None


def _key(fs: Any, path: Any) -> str:
    """The S3 key of an S3A path (no leading slash)."""
    return str(fs.pathToKey(path)).strip("/")


def join(root: str, *parts: str) -> str:
    """Join URI path segments with single slashes."""
    joined = root.rstrip("/")
    for part in parts:
        if part:
            joined += "/" + part.strip("/")
    return joined


class HadoopFileSystem:
    """File operations on Hadoop URIs through a SparkContext's JVM."""

    def __init__(self, jvm: Any, hadoop_conf: Any, gateway: Any) -> None:
        self._jvm = jvm
        self._conf = hadoop_conf
        self._gateway = gateway
        # files copied by the object store itself (S3 CopyObject, GCS copy/rewrite, Azure Copy Blob)
        self.server_side_copies = 0

    @classmethod
    def of_session(cls, spark: Any) -> HadoopFileSystem:
        context = spark.sparkContext
        return cls(context._jvm, context._jsc.hadoopConfiguration(), context._gateway)

    def _path(self, uri: str) -> Any:
        return self._jvm.org.apache.hadoop.fs.Path(uri)

    def _fs(self, path: Any) -> Any:
        return path.getFileSystem(self._conf)

    def exists(self, uri: str) -> bool:
        path = self._path(uri)
        return bool(self._fs(path).exists(path))

    def list_files(self, root: str) -> dict[str, int]:
        """Every file below ``root`` as ``{relative path: size in bytes}``; empty if it is absent.

        Walks directories with ``listStatus`` (not ``listFiles``, whose located statuses load
        permissions and fail on files a running query renames away meanwhile); entries that
        vanish during the walk are skipped.
        """
        files: dict[str, int] = {}
        pending = [("", self._path(root))]
        while pending:
            relative, path = pending.pop()
            for status in self._statuses(path):
                name = str(status.getPath().getName())
                child = f"{relative}/{name}" if relative else name
                if status.isDirectory():
                    pending.append((child, status.getPath()))
                else:
                    files[child] = int(status.getLen())
        return files

    def _statuses(self, path: Any) -> list[Any]:
        try:
            return list(self._fs(path).listStatus(path))
        except Py4JJavaError as error:
            if _is_missing(error):
                return []
            raise

    def list_names(self, directory: str) -> list[str]:
        """Names of the direct children of ``directory``; empty if it is absent."""
        path = self._path(directory)
        fs = self._fs(path)
        if not fs.exists(path):
            return []
        return sorted(str(status.getPath().getName()) for status in fs.listStatus(path))

    def read_text(self, uri: str) -> str:
        path = self._path(uri)
        try:
            stream = self._fs(path).open(path)
        except Py4JJavaError as error:
            if _is_missing(error):
                raise MissingFileError(uri) from None
            raise
        try:
            return str(self._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()

    def read_bytes(self, uri: str) -> bytes:
        path = self._path(uri)
        stream = self._fs(path).open(path)
        try:
            return bytes(self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
        finally:
            stream.close()

    def write_text(self, uri: str, text: str, overwrite: bool = True) -> None:
        path = self._path(uri)
        stream = self._fs(path).create(path, overwrite)
        try:
            stream.write(bytearray(text.encode("utf-8")))
        finally:
            stream.close()

    def copy(self, source: str, target: str) -> None:
        """Copy one file; raise :class:`MissingFileError` if the source is gone."""
        source_path, target_path = self._path(source), self._path(target)
        try:
            self._jvm.org.apache.hadoop.fs.FileUtil.copy(
                self._fs(source_path), source_path, self._fs(target_path), target_path, False, True, self._conf
            )
        except Py4JJavaError as error:
            if _is_missing(error):
                raise MissingFileError(source) from None
            raise

    def _copy_into(self, source_dir: str, names: list[str], target_dir: str) -> None:
        """Copy files of one directory into another in a single JVM call (raises on any failure)."""
        path_class = self._jvm.org.apache.hadoop.fs.Path
        sources = self._gateway.new_array(path_class, len(names))
        for index, name in enumerate(names):
            sources[index] = self._path(join(source_dir, name))
        target = self._path(target_dir)
        target_fs = self._fs(target)
        target_fs.mkdirs(target)
        self._jvm.org.apache.hadoop.fs.FileUtil.copy(
            self._fs(sources[0]), sources, target_fs, target, False, True, self._conf
        )

    def copy_files(self, source_root: str, target_root: str, relative_paths: list[str]) -> list[str]:
        """Copy files below ``source_root`` to the same relative paths below ``target_root``.

        One JVM call per directory; a directory whose batch copy fails is retried file by file.
        Returns the relative paths that did not exist (vanished or never there).
        """
        if self._is_local(source_root) and self._is_local(target_root):
            return self._link_or_copy(source_root, target_root, relative_paths)
        same_bucket = self._s3a_bucket(source_root)
        if same_bucket is not None and same_bucket == self._s3a_bucket(target_root):
            copied = self._server_side_copy(same_bucket, source_root, target_root, relative_paths)
            if copied is not None:
                return copied
        on_gcs = self._gcs_copy(source_root, target_root, relative_paths)
        if on_gcs is not None:
            return on_gcs
        on_azure = self._azure_copy(source_root, target_root, relative_paths)
        if on_azure is not None:
            return on_azure
        by_directory: dict[str, list[str]] = {}
        for relative in relative_paths:
            directory, _, name = relative.rpartition("/")
            by_directory.setdefault(directory, []).append(name)
        missing: list[str] = []
        for directory, names in sorted(by_directory.items()):
            try:
                self._copy_into(join(source_root, directory), names, join(target_root, directory))
                continue
            except Py4JJavaError:
                pass
            for name in names:
                relative = f"{directory}/{name}" if directory else name
                try:
                    self.copy(join(source_root, relative), join(target_root, relative))
                except MissingFileError:
                    missing.append(relative)
        return missing

    def _is_local(self, uri: str) -> bool:
        return str(self._fs(self._path(uri)).getScheme()) == "file"

    def _local_path(self, uri: str) -> Path:
        return Path(str(self._path(uri).toUri().getPath()))

    def _link_or_copy(self, source_root: str, target_root: str, relative_paths: list[str]) -> list[str]:
        """Local files (a PVC, a hostPath): hard links where the volume allows, else native copies."""
        source, target = self._local_path(source_root), self._local_path(target_root)
        missing = []
        for relative in relative_paths:
            destination = target / relative
            destination.parent.mkdir(parents=True, exist_ok=True)
            try:
                try:
                    os.link(source / relative, destination)
                except FileNotFoundError:
                    raise
                except OSError:  # another file system, no hard links, or the name exists
                    shutil.copy2(source / relative, destination)
            except FileNotFoundError:
                missing.append(relative)
        return missing

    def _s3a_bucket(self, uri: str) -> Any:
        """(bucket, its S3AFileSystem) when `uri` is on S3A, else None."""
        path = self._path(uri)
        if str(path.toUri().getScheme()) != "s3a":
            return None
        return str(path.toUri().getHost()), self._fs(path)

    def _server_side_copy(
        self, bucket: tuple[str, Any], source_root: str, target_root: str, relative_paths: list[str]
    ) -> list[str] | None:
        """Copy with CopyObject requests in parallel; the missing paths, or None when S3A's client is not
        reachable (then the caller copies through Hadoop)."""
        name, fs = bucket
        try:
            client = fs.getS3AInternals().getAmazonS3Client("headrace savepoint copy")
        except Py4JError:
            return None
        requests = self._jvm.software.amazon.awssdk.services.s3.model.CopyObjectRequest

        source_prefix, target_prefix = _key(fs, self._path(source_root)), _key(fs, self._path(target_root))

        def copy_one(relative: str) -> str | None:
            source_key = f"{source_prefix}/{relative}" if source_prefix else relative
            target_key = f"{target_prefix}/{relative}" if target_prefix else relative
            request = (
                requests.builder()
                .sourceBucket(name)
                .sourceKey(source_key)
                .destinationBucket(name)
                .destinationKey(target_key)
                .build()
            )
            try:
                client.copyObject(request)
            except Py4JJavaError as error:
                if "NoSuchKey" in str(error.java_exception.getClass().getName()):
                    return relative
                raise
            return None

        with ThreadPoolExecutor(max_workers=SERVER_SIDE_COPY_THREADS) as pool:
            outcomes = list(pool.map(copy_one, relative_paths))
        self.server_side_copies += sum(1 for outcome in outcomes if outcome is None)
        return sorted(outcome for outcome in outcomes if outcome is not None)

    def _gcs_copy(self, source_root: str, target_root: str, relative_paths: list[str]) -> list[str] | None:
        """Copy between gs:// paths with the connector's own client (the store copies, in batches); the missing
        paths, or None when either side is not on Cloud Storage or the client is not reachable (then the caller
        copies through Hadoop)."""
        source, target = self._path(source_root), self._path(target_root)
        if {str(source.toUri().getScheme()), str(target.toUri().getScheme())} != {"gs"}:
            return None
        try:
            gcs = self._fs(source).getGcsFs().getGcs()
        except Py4JError:
            return None
        buckets = str(source.toUri().getHost()), str(target.toUri().getHost())
        prefixes = [str(path.toUri().getPath()).strip("/") for path in (source, target)]

        def names(prefix: str, chunk: list[str]) -> Any:
            listed = self._jvm.java.util.ArrayList()
            for relative in chunk:
                listed.add(f"{prefix}/{relative}" if prefix else relative)
            return listed

        def copy(chunk: list[str]) -> None:
            gcs.copy(buckets[0], names(prefixes[0], chunk), buckets[1], names(prefixes[1], chunk))

        missing: list[str] = []
        for start in range(0, len(relative_paths), GCS_COPY_CHUNK):
            chunk = relative_paths[start : start + GCS_COPY_CHUNK]
            try:
                copy(chunk)
            except Py4JJavaError as error:
                if not _is_missing(error):
                    raise
                for relative in chunk:  # one of them is gone: find which, one by one
                    try:
                        copy([relative])
                    except Py4JJavaError as single:
                        if not _is_missing(single):
                            raise
                        missing.append(relative)
        self.server_side_copies += len(relative_paths) - len(missing)
        return sorted(missing)

    def _azure_blob_client(self, source: Any, target: Any) -> Any:
        """The ABFS connector's Blob client when both paths are in one container of a flat-namespace account (whose
        file system talks to the Blob endpoint), else None. A hierarchical-namespace account's DFS endpoint has no
        copy: its files are copied through Hadoop."""
        source_uri, target_uri = source.toUri(), target.toUri()
        schemes = {str(source_uri.getScheme()), str(target_uri.getScheme())}
        if not schemes <= {"abfs", "abfss"} or str(source_uri.getAuthority()) != str(target_uri.getAuthority()):
            return None
        try:
            store = self._fs(source).getAbfsStore()
            if str(store.getClient().getClass().getSimpleName()) != "AbfsBlobClient":
                return None
            return store.getClientHandler().getBlobClient()
        except Py4JError:
            return None

    def _azure_copy(self, source_root: str, target_root: str, relative_paths: list[str]) -> list[str] | None:
        """Copy with Copy Blob requests in parallel (the store copies; a copy it reports pending is waited for); the
        missing paths, or None when the Blob client does not serve both sides (then the caller copies through
        Hadoop)."""
        source, target = self._path(source_root), self._path(target_root)
        client = self._azure_blob_client(source, target)
        if client is None:
            return None
        abfs = self._jvm.org.apache.hadoop.fs.azurebfs
        # The connector has no operation type for a copy: it is the first step of its own rename on this endpoint.
        operation, header_format = abfs.constants.FSOperationType.RENAME, abfs.utils.TracingHeaderFormat.ALL_ID_FORMAT

        def copy_one(relative: str) -> str | None:
            tracing = abfs.utils.TracingContext("headrace", "savepoint-copy", operation, header_format, None)
            source_file, target_file = self._path(join(source_root, relative)), self._path(join(target_root, relative))
            try:
                answer = client.copyBlob(source_file, target_file, None, tracing).getResult()
            except Py4JJavaError as error:
                if _http_status(error) == 404:
                    return relative
                raise
            if str(answer.getResponseHeader("x-ms-copy-status")) != "success":
                self._await_azure_copy(client, str(target_file.toUri().getPath()), tracing)
            return None

        with ThreadPoolExecutor(max_workers=SERVER_SIDE_COPY_THREADS) as pool:
            outcomes = list(pool.map(copy_one, relative_paths))
        self.server_side_copies += sum(1 for outcome in outcomes if outcome is None)
        return sorted(outcome for outcome in outcomes if outcome is not None)

    @staticmethod
    def _await_azure_copy(client: Any, path: str, tracing: Any) -> None:
        """Poll the target's properties until its pending copy succeeded; raise if it failed or took too long."""
        deadline = time.monotonic() + AZURE_COPY_WAIT_SECONDS
        while True:
            status = str(
                client.getPathStatus(path, tracing, None, False).getResult().getResponseHeader("x-ms-copy-status")
            )
            if status == "success":
                return
            if status != "pending" or time.monotonic() > deadline:
                raise OSError(f"Copy Blob to {path} ended {status}")
            time.sleep(AZURE_COPY_POLL_SECONDS)

    def rename(self, source: str, target: str) -> bool:
        source_path, target_path = self._path(source), self._path(target)
        return bool(self._fs(source_path).rename(source_path, target_path))

    def delete(self, uri: str) -> None:
        path = self._path(uri)
        self._fs(path).delete(path, True)

    def mkdirs(self, uri: str) -> None:
        path = self._path(uri)
        self._fs(path).mkdirs(path)

    def qualify(self, uri: str) -> str:
        """The fully qualified URI (``/x`` becomes ``file:/x`` on the local file system)."""
        path = self._path(uri)
        return str(self._fs(path).makeQualified(path).toString())

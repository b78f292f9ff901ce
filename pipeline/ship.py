"""``busgate journal ship DIR URL``: copy a journal's closed segments to any Hadoop file system.

The target is a directory URL that Hadoop's FileSystem API reaches (``hdfs://``, ``webhdfs://``,
``s3a://`` with its jars, ``file://``, ...; the configuration is ``core-site.xml`` in
``HADOOP_CONF_DIR`` and Hadoop keys given as ``--conf KEY=VALUE``). Hadoop's
client runs in a JVM started with PySpark's jars and driven through py4j; the bytes go from the
local file system to the target inside it.

What is shipped and how (PROTOCOL.md section 8, "Shipping"):

- only closed segments (:func:`bus.journal.closed_segments`: never the one being written), oldest
  first, each with its index file when it has one (the index first, so a reader that sees a
  segment sees its index);
- each file is written under a hidden temporary name (``.NAME.ID.shipping``) and renamed into
  place once its size is checked, so a reader of the target never sees half a segment;
- a segment already at the target with the same size and header is left alone: shipping again
  ships what is new (idempotent), and a run that was stopped is finished by the next
  (resumable); one with the same name but other bytes is an error and is never overwritten
  (the shipping stops there, so the target stays a run of whole segments with no gap).
"""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bus.errors import JournalError
from bus.journal import SEGMENT_HEADER_SIZE, SegmentInfo, closed_segments, index_path

__all__ = ["HadoopTarget", "Shipped", "ship"]

_HEAD = SEGMENT_HEADER_SIZE  # the bytes compared to tell two segments of one name apart


@dataclass(frozen=True)
class Shipped:
    """What :func:`ship` did with one closed segment.

    Attributes:
        segment: the local segment file.
        url: where it is at the target.
        size: its size in bytes.
        written: False when the target already had it.
    """

    segment: Path
    url: str
    size: int
    written: bool


class HadoopTarget:
    """A directory on a Hadoop file system, reached through Hadoop's client in a JVM.

    Args:
        url: the directory (created when missing).
        conf: more Hadoop settings (``fs.s3a.endpoint`` ...), over ``core-site.xml``.
        gateway: a py4j gateway to use (else one is started, and stopped by :meth:`close`).
    """

    def __init__(self, url: str, conf: dict[str, str] | None = None, gateway: Any = None) -> None:
        if gateway is None:  # a SparkContext in this process: its JVM has Hadoop's client too
            from pyspark import SparkContext

            gateway = SparkContext._gateway
        self._own = gateway is None
        self._log: Any = None
        self._gateway = gateway if gateway is not None else self._start()
        jvm = self._gateway.jvm
        self._jvm = jvm
        hadoop_conf = jvm.org.apache.hadoop.conf.Configuration()
        for key, value in (conf or {}).items():
            hadoop_conf.set(key, value)
        self._conf = hadoop_conf
        try:
            jvm.busgate.spark.MediaTypes.install()  # webhdfs:// replies (pipeline/jvm MediaTypes)
        except Exception:  # noqa: BLE001, S110 - no JVM reader built: Hadoop's client as it is
            pass
        try:
            self._dir = jvm.org.apache.hadoop.fs.Path(url)
            self._fs = self._dir.getFileSystem(hadoop_conf)
            self._dir = self._fs.makeQualified(self._dir)
            self._fs.setWriteChecksum(False)  # no .crc files beside segments on file://
            self._fs.mkdirs(self._dir)
        except Exception as exc:
            line = _java_line(exc)
            self.close()
            raise JournalError(url, -1, f"cannot reach the target: {line}") from exc
        self.url = str(self._dir.toString())

    def _start(self) -> Any:
        """A JVM with PySpark's jars (Hadoop's client), the JVM reader's jar and
        ``HADOOP_CONF_DIR`` on its class path (as ``spark-submit`` puts them), driven by py4j."""
        import pyspark
        from py4j.java_gateway import (  # type: ignore[import-untyped]
            GatewayParameters,
            JavaGateway,
            launch_gateway,
        )

        from pipeline.jvm import jar_path
        from pipeline.session import QUICK_START_OPTIONS

        path = [str(Path(pyspark.__file__).parent / "jars" / "*")]
        jar = jar_path()
        if jar is not None:
            path.append(str(jar))
        if os.environ.get("HADOOP_CONF_DIR"):
            path.append(os.environ["HADOOP_CONF_DIR"])
        self._log = tempfile.TemporaryFile()  # the JVM's chatter, shown if it fails to start
        try:
            port = launch_gateway(
                classpath=os.pathsep.join(path),
                javaopts=QUICK_START_OPTIONS.split(),  # it only copies files: start fast
                die_on_exit=True,
                redirect_stderr=self._log,
            )
        except Exception as exc:
            self._log.seek(0)
            said = self._log.read().decode(errors="replace").strip().splitlines()[-5:]
            raise JournalError(
                "", -1, f"cannot start Hadoop's client (Java): {exc} {said}"
            ) from exc
        return JavaGateway(gateway_parameters=GatewayParameters(port=port))

    def _path(self, name: str) -> Any:
        return self._jvm.org.apache.hadoop.fs.Path(self._dir, name)

    def listing(self) -> dict[str, int]:
        """The files in the directory, by name, with their sizes."""
        return {
            str(s.getPath().getName()): int(s.getLen())
            for s in self._fs.listStatus(self._dir)
            if s.isFile()
        }

    def head(self, name: str, size: int) -> bytes:
        """The first ``size`` bytes of a file."""
        stream = self._fs.open(self._path(name))
        try:
            return bytes(stream.readNBytes(size))  # py4j hands a byte[] over as bytes
        finally:
            stream.close()

    def put(self, local: Path, name: str) -> int:
        """Copy a local file to ``name`` in the directory (a temporary name, then a rename).

        Returns:
            The size the target reports for it.

        Raises:
            JournalError: the copy failed, or the target's size is not the local size.
        """
        jvm = self._jvm
        size = local.stat().st_size
        temp = self._path(f".{name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.shipping")
        target = self._path(name)
        source = jvm.org.apache.hadoop.fs.Path(local.resolve().as_uri())
        local_fs = source.getFileSystem(self._conf)
        try:
            jvm.org.apache.hadoop.fs.FileUtil.copy(
                local_fs, source, self._fs, temp, False, True, self._conf
            )
            copied = int(self._fs.getFileStatus(temp).getLen())
            if copied != size:
                raise JournalError(str(local), -1, f"shipped {copied} of {size} bytes")
            if not self._fs.rename(temp, target):
                # there already (another shipper, or an old index): the caller compares it
                self._fs.delete(temp, False)
            return int(self._fs.getFileStatus(target).getLen())
        except JournalError:
            self._fs.delete(temp, False)
            raise
        except Exception as exc:
            try:
                self._fs.delete(temp, False)
            except Exception:  # noqa: BLE001, S110 - the target is gone too: say the first error
                pass
            raise JournalError(str(local), -1, f"cannot ship: {_java_line(exc)}") from exc

    def remove(self, name: str) -> None:
        """Delete a file of the directory (a temporary file left by a stopped run)."""
        self._fs.delete(self._path(name), False)

    def replace(self, local: Path, name: str) -> None:
        """Ship ``local`` as ``name`` over a file of that name (an index, never a segment)."""
        self._fs.delete(self._path(name), False)
        self.put(local, name)

    def close(self) -> None:
        """Stop the JVM this target started."""
        if self._own and self._gateway is not None:
            self._gateway.shutdown()  # the JVM exits with it (die_on_exit), or with this process
            self._gateway = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> HadoopTarget:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _java_line(exc: BaseException) -> str:
    """The Java exception's first line (py4j wraps it in a long text)."""
    java = getattr(exc, "java_exception", None)
    if java is not None:
        return str(java.toString())
    text = str(exc).strip()
    return text.splitlines()[0] if text else repr(exc)


def _ship_one(target: HadoopTarget, info: SegmentInfo, there: dict[str, int]) -> Shipped:
    segment = info.path
    url = f"{target.url.rstrip('/')}/{segment.name}"
    index = index_path(segment)
    if index.is_file() and there.get(index.name) != index.stat().st_size:
        if index.name in there:
            target.replace(index, index.name)
        else:
            target.put(index, index.name)
    for name in there:  # what a stopped run left of this segment
        if name.startswith(f".{segment.name}.") and name.endswith(".shipping"):
            target.remove(name)
    if segment.name in there:
        with segment.open("rb") as fh:
            mine = fh.read(_HEAD)
        if there[segment.name] != info.size or target.head(segment.name, _HEAD) != mine:
            raise JournalError(
                url,
                -1,
                f"the target has another {segment.name} ({there[segment.name]} bytes, "
                f"here {info.size}): not overwritten, shipping stopped",
            )
        return Shipped(segment, url, info.size, False)
    size = target.put(segment, segment.name)
    if size != info.size:  # someone else shipped a different one meanwhile
        raise JournalError(url, -1, f"the target has {size} bytes, here {info.size}")
    return Shipped(segment, url, info.size, True)


def ship(directory: str | os.PathLike[str], target: HadoopTarget) -> Iterator[Shipped]:
    """Ship every closed segment of ``directory`` that the target lacks, oldest first.

    Args:
        directory: the local journal directory.
        target: where to (:class:`HadoopTarget`).

    Yields:
        One :class:`Shipped` per closed segment, as it is done.

    Raises:
        JournalError: no such directory, or a segment could not be shipped (the ones before it
            were).
    """
    local = Path(directory)
    if not local.is_dir():
        raise JournalError(str(local), -1, "no such journal directory")
    there = target.listing()
    for info in closed_segments(local):
        yield _ship_one(target, info, there)


def follow(
    directory: str | os.PathLike[str],
    target: HadoopTarget,
    interval: float,
    stop: Callable[[], bool],
) -> Iterator[Shipped]:
    """:func:`ship`, then again every ``interval`` seconds until ``stop()`` says so."""
    while True:
        yield from ship(directory, target)
        deadline = time.monotonic() + interval
        while time.monotonic() < deadline:
            if stop():
                return
            time.sleep(min(0.2, interval))

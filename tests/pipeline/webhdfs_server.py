"""A small WebHDFS server over a local directory, for the tests and the bench (no HDFS here).

It speaks the WebHDFS REST protocol as a NameNode and its DataNodes do (``/webhdfs/v1/PATH?op=...``,
JSON replies with ``Content-Type: application/json``, ``RemoteException`` errors, and ``OPEN`` and
``CREATE`` redirected with 307 to a "DataNode" URL on the same server), so Hadoop's own client,
``org.apache.hadoop.hdfs.web.WebHdfsFileSystem`` from PySpark's jars, reads and writes through it:
``webhdfs://127.0.0.1:PORT/path``, and ``hdfs://`` too where a ``core-site.xml`` sets
``fs.hdfs.impl`` to that class. Operations: GETFILESTATUS, LISTSTATUS, LISTSTATUS_BATCH, OPEN
(``offset``, ``length``), GETFILEBLOCKLOCATIONS, GETHOMEDIRECTORY, GETFILECHECKSUM (refused),
CREATE (chunked bodies), MKDIRS, RENAME, DELETE, SETPERMISSION, SETTIMES.

Run it alone: ``python tests/pipeline/webhdfs_server.py ROOT [--port N]`` prints its URL.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

__all__ = ["WebHdfsServer"]

PREFIX = "/webhdfs/v1"
BLOCK_SIZE = 128 * 1024 * 1024
_ERRORS = {
    404: ("FileNotFoundException", "java.io.FileNotFoundException"),
    403: ("AccessControlException", "org.apache.hadoop.security.AccessControlException"),
    400: ("IllegalArgumentException", "java.lang.IllegalArgumentException"),
    409: ("FileAlreadyExistsException", "org.apache.hadoop.fs.FileAlreadyExistsException"),
}


class _Failure(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        return None

    # -- replies -------------------------------------------------------------------------------

    def _send(self, status: int, body: bytes, content_type: str | None, **headers: str) -> None:
        self.send_response(status)
        if content_type is not None:
            self.send_header("Content-Type", content_type)
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, value: Any) -> None:
        body = json.dumps(value).encode()
        self._send(status, body, "application/json" if self.server.json_content_type else None)

    def _error(self, status: int, message: str) -> None:
        name, java = _ERRORS.get(status, ("IOException", "java.io.IOException"))
        self._json(
            status,
            {"RemoteException": {"exception": name, "javaClassName": java, "message": message}},
        )

    # -- requests ------------------------------------------------------------------------------

    def _local(self, path: str) -> Path:
        parts = [p for p in path.split("/") if p]
        if any(p in (".", "..") for p in parts):
            raise _Failure(400, f"Invalid path name {path}")
        return self.server.root.joinpath(*parts)

    def _handle(self) -> None:
        url = urlsplit(self.path)
        if not url.path.startswith(PREFIX):
            raise _Failure(404, f"not a WebHDFS URL: {url.path}")
        path = url.path[len(PREFIX) :] or "/"
        from urllib.parse import unquote

        path = unquote(path)
        query = {k.lower(): v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        op = query.get("op", "").upper()
        with self.server.lock:
            self.server.ops[op] += 1
        handler = getattr(self, f"_op_{self.command}_{op}", None)
        if handler is None:
            raise _Failure(400, f'Invalid value for webhdfs parameter "op": {op} ({self.command})')
        handler(path, self._local(path), query)

    def _run(self) -> None:
        try:
            try:
                self._handle()
            except _Failure as exc:
                self._drain()
                self._error(exc.status, str(exc))
            except ConnectionError:
                raise
            except OSError as exc:
                self._drain()
                self._error(500, f"{type(exc).__name__}: {exc}")
        except ConnectionError:  # the client is gone: nothing to answer
            self.close_connection = True

    def _drain(self) -> None:
        """Read a request body not used, so the connection stays in step."""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            self._read_chunked(None)
        elif self.headers.get("Content-Length"):
            self.rfile.read(int(self.headers["Content-Length"]))

    do_GET = do_PUT = do_POST = do_DELETE = _run  # noqa: N815 - http.server's names

    # -- statuses ------------------------------------------------------------------------------

    @staticmethod
    def _status(local: Path, suffix: str) -> dict[str, Any]:
        st = local.stat()
        directory = local.is_dir()
        return {
            "accessTime": int(st.st_atime * 1000),
            "blockSize": 0 if directory else BLOCK_SIZE,
            "childrenNum": len(os.listdir(local)) if directory else 0,
            "fileId": st.st_ino,
            "group": "supergroup",
            "length": 0 if directory else st.st_size,
            "modificationTime": int(st.st_mtime * 1000),
            "owner": "busgate",
            "pathSuffix": suffix,
            "permission": format(st.st_mode & 0o777, "o"),
            "replication": 0 if directory else 1,
            "storagePolicy": 0,
            "type": "DIRECTORY" if directory else "FILE",
        }

    def _exists(self, path: str, local: Path) -> None:
        if not local.exists():
            raise _Failure(404, f"File does not exist: {path}")

    def _op_GET_GETFILESTATUS(self, path: str, local: Path, query: dict[str, str]) -> None:  # noqa: N802
        self._exists(path, local)
        self._json(200, {"FileStatus": self._status(local, "")})

    def _listing(self, path: str, local: Path) -> list[dict[str, Any]]:
        self._exists(path, local)
        if not local.is_dir():
            return [self._status(local, "")]
        return [self._status(local / name, name) for name in sorted(os.listdir(local))]

    def _op_GET_LISTSTATUS(self, path: str, local: Path, query: dict[str, str]) -> None:  # noqa: N802
        self._json(200, {"FileStatuses": {"FileStatus": self._listing(path, local)}})

    def _op_GET_LISTSTATUS_BATCH(self, path: str, local: Path, query: dict[str, str]) -> None:  # noqa: N802
        after = query.get("startafter", "")
        entries = [e for e in self._listing(path, local) if not after or e["pathSuffix"] > after]
        page = entries[: self.server.list_limit]
        self._json(
            200,
            {
                "DirectoryListing": {
                    "partialListing": {"FileStatuses": {"FileStatus": page}},
                    "remainingEntries": len(entries) - len(page),
                }
            },
        )

    def _op_GET_GETHOMEDIRECTORY(self, path: str, local: Path, query: dict[str, str]) -> None:  # noqa: N802
        self._json(200, {"Path": f"/user/{query.get('user.name', 'busgate')}"})

    def _op_GET_GETFILEBLOCKLOCATIONS(self, path: str, local: Path, query: dict[str, str]) -> None:  # noqa: N802
        self._exists(path, local)
        size = local.stat().st_size
        start = int(query.get("offset", "0"))
        stop = min(size, start + int(query.get("length", str(size))))
        name = f"127.0.0.1:{self.server.server_port}"
        blocks = []
        for offset in range(start - start % BLOCK_SIZE, stop, BLOCK_SIZE):
            blocks.append(
                {
                    "cachedHosts": [],
                    "corrupt": False,
                    "hosts": ["127.0.0.1"],
                    "names": [name],
                    "offset": offset,
                    "length": min(BLOCK_SIZE, size - offset),
                    "storageTypes": ["DISK"],
                    "topologyPaths": [f"/default-rack/{name}"],
                }
            )
        self._json(200, {"BlockLocations": {"BlockLocation": blocks}})

    def _op_GET_GETFILECHECKSUM(self, path: str, local: Path, query: dict[str, str]) -> None:  # noqa: N802
        raise _Failure(400, "GETFILECHECKSUM is not served by this test server")

    # -- reading: the NameNode redirects, the "DataNode" serves the bytes -----------------------

    def _redirect(self, path: str, query: dict[str, str]) -> None:
        target = dict(query, datanode="true")
        target.pop("noredirect", None)
        location = f"http://127.0.0.1:{self.server.server_port}{PREFIX}{quote(path)}?" + "&".join(
            f"{quote(k)}={quote(v)}" for k, v in target.items()
        )
        if query.get("noredirect", "false").lower() == "true":
            self._json(200, {"Location": location})
        else:
            self._send(307, b"", "application/octet-stream", Location=location)

    def _op_GET_OPEN(self, path: str, local: Path, query: dict[str, str]) -> None:  # noqa: N802
        if query.get("datanode") != "true":
            self._exists(path, local)
            self._redirect(path, query)
            return
        if not local.is_file():
            raise _Failure(404, f"File does not exist: {path}")
        size = local.stat().st_size
        start = int(query.get("offset", "0"))
        if start > size:
            raise _Failure(400, f"Offset={start} out of the range [0, {size}); OPEN, path={path}")
        length = size - start if "length" not in query else min(int(query["length"]), size - start)
        with self.server.lock:
            self.server.reads.append((path, start))
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(length))
        self.end_headers()
        with local.open("rb") as fh:
            fh.seek(start)
            left = length
            while left > 0:
                data = fh.read(min(left, 1 << 20))
                if not data:
                    break
                try:
                    self.wfile.write(data)
                except ConnectionError:  # the client took what it wanted and closed (as Hadoop's
                    self.close_connection = True  # client does after a positioned read)
                    return
                left -= len(data)
                with self.server.lock:
                    self.server.bytes_read += len(data)

    # -- writing ---------------------------------------------------------------------------------

    def _read_chunked(self, out: Any) -> int:
        total = 0
        while True:
            line = self.rfile.readline()
            size = int(line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return total
            data = self.rfile.read(size)
            self.rfile.readline()
            total += len(data)
            if out is not None:
                out.write(data)

    def _op_PUT_CREATE(self, path: str, local: Path, query: dict[str, str]) -> None:  # noqa: N802
        overwrite = query.get("overwrite", "false").lower() == "true"
        if query.get("datanode") != "true":
            self._drain()
            if local.exists() and (local.is_dir() or not overwrite):
                raise _Failure(409, f"{path} already exists")
            self._redirect(path, query)
            return
        if local.exists() and (local.is_dir() or not overwrite):
            raise _Failure(409, f"{path} already exists")
        local.parent.mkdir(parents=True, exist_ok=True)
        with local.open("wb") as fh:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                written = self._read_chunked(fh)
            else:
                left = int(self.headers.get("Content-Length", "0"))
                written = 0
                while left > 0:
                    data = self.rfile.read(min(left, 1 << 20))
                    if not data:
                        break
                    fh.write(data)
                    left -= len(data)
                    written += len(data)
        with self.server.lock:
            self.server.bytes_written += written
        location = f"hdfs://127.0.0.1:{self.server.server_port}{quote(path)}"
        self._send(201, b"", None, Location=location)

    def _op_PUT_MKDIRS(self, path: str, local: Path, query: dict[str, str]) -> None:  # noqa: N802
        self._drain()
        if local.exists() and not local.is_dir():
            raise _Failure(409, f"{path} is a file")
        local.mkdir(parents=True, exist_ok=True)
        self._json(200, {"boolean": True})

    def _op_PUT_RENAME(self, path: str, local: Path, query: dict[str, str]) -> None:  # noqa: N802
        self._drain()
        target = self._local(query.get("destination", ""))
        if not local.exists() or target.exists() or not target.parent.is_dir():
            self._json(200, {"boolean": False})  # as HDFS: rename onto a file fails
            return
        local.rename(target)
        self._json(200, {"boolean": True})

    def _op_PUT_SETPERMISSION(self, path: str, local: Path, query: dict[str, str]) -> None:  # noqa: N802
        self._drain()
        self._exists(path, local)
        self._send(200, b"", None)

    _op_PUT_SETTIMES = _op_PUT_SETOWNER = _op_PUT_SETPERMISSION  # noqa: N815

    def _op_DELETE_DELETE(self, path: str, local: Path, query: dict[str, str]) -> None:  # noqa: N802
        self._drain()
        if not local.exists():
            self._json(200, {"boolean": False})
            return
        if local.is_dir():
            if any(local.iterdir()) and query.get("recursive", "false").lower() != "true":
                raise _Failure(500, f"{path} is non empty")
            shutil.rmtree(local)
        else:
            local.unlink()
        self._json(200, {"boolean": True})


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    root: Path
    json_content_type: bool
    list_limit: int
    lock: threading.Lock
    ops: Counter[str]
    reads: list[tuple[str, int]]
    bytes_read: int
    bytes_written: int


class WebHdfsServer:
    """A WebHDFS server over ``root`` on 127.0.0.1 (port 0: a free one), in a thread.

    Args:
        root: the directory served as ``/``.
        port: the port (0: any free one).
        json_content_type: send ``Content-Type: application/json`` with JSON replies, as a
            NameNode does (PySpark's shaded Hadoop client cannot parse that header by itself).
        list_limit: entries per LISTSTATUS_BATCH page (a NameNode's default is 1000).
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        port: int = 0,
        *,
        json_content_type: bool = True,
        list_limit: int = 1000,
    ) -> None:
        self._server = _Server(("127.0.0.1", port), _Handler)
        self._server.root = Path(root)
        self._server.json_content_type = json_content_type
        self._server.list_limit = list_limit
        self._server.lock = threading.Lock()
        self._server.ops = Counter()
        self._server.reads = []
        self._server.bytes_read = 0
        self._server.bytes_written = 0
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The port it listens on."""
        return int(self._server.server_port)

    @property
    def ops(self) -> Counter[str]:
        """Requests served, by operation."""
        return self._server.ops

    @property
    def reads(self) -> list[tuple[str, int]]:
        """Where each read (a DataNode's OPEN) started: (path, offset)."""
        return self._server.reads

    @property
    def bytes_read(self) -> int:
        """Bytes sent by OPEN (a client that stops reading may not take them all)."""
        return self._server.bytes_read

    def url(self, scheme: str = "webhdfs", path: str = "/") -> str:
        """``SCHEME://127.0.0.1:PORT/PATH``."""
        return f"{scheme}://127.0.0.1:{self.port}/{path.lstrip('/')}"

    def start(self) -> WebHdfsServer:
        """Serve in a daemon thread."""
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(10)
        self._server.server_close()

    def __enter__(self) -> WebHdfsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def core_site(directory: str | os.PathLike[str]) -> Path:
    """Write ``core-site.xml`` routing ``hdfs://`` to Hadoop's WebHDFS client (a directory for
    ``HADOOP_CONF_DIR``); returns the directory."""
    conf = Path(directory)
    conf.mkdir(parents=True, exist_ok=True)
    (conf / "core-site.xml").write_text(
        '<?xml version="1.0"?>\n<configuration>\n'
        "  <property><name>fs.hdfs.impl</name>"
        "<value>org.apache.hadoop.hdfs.web.WebHdfsFileSystem</value></property>\n"
        "  <property><name>fs.AbstractFileSystem.hdfs.impl</name>"
        "<value>org.apache.hadoop.fs.WebHdfs</value></property>\n"
        "</configuration>\n"
    )
    return conf


def main() -> None:
    """Serve a directory until killed; print the URL first."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    server = WebHdfsServer(args.root, args.port)
    print(server.url(), flush=True)
    try:
        server._server.serve_forever()
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()

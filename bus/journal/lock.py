"""One writer per journal directory: :class:`DirectoryLock` (PROTOCOL.md 10.2).

Two processes appending to one journal directory would each number their own segments and
records; the recorder therefore holds an exclusive ``flock`` on ``DIR/recorder.lock`` while it
writes. The kernel lets the lock go when its process dies (kill -9 included), so a standby on
the same directory may take over at once; on a network file system the lock is only as good
as the file system's ``flock`` (NFSv4: yes). Readers never take it. The file holds the
holder's host and pid, for the message a waiting recorder prints.
"""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path
from typing import Final

from bus.errors import JournalError

__all__ = ["LOCK_NAME", "DirectoryLock"]

#: The lock file's name inside the journal directory (readers list segments by name only).
LOCK_NAME: Final = "recorder.lock"


class DirectoryLock:
    """An exclusive, non-blocking ``flock`` on ``directory/recorder.lock``.

    Args:
        directory: the journal directory (created if missing).
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.path = Path(directory) / LOCK_NAME
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None

    def acquire(self) -> bool:
        """Take the lock if nobody holds it.

        Returns:
            True when it is held now (also when it already was), False when another process
            holds it.

        Raises:
            JournalError: the directory or the lock file cannot be created.
        """
        if self._fd is not None:
            return True
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise JournalError(str(self.path), 0, f"cannot open lock: {exc.strerror}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{socket.gethostname()} {os.getpid()}\n".encode())
        except OSError:
            pass  # the lock holds without the note
        self._fd = fd
        return True

    def holder(self) -> str:
        """What the lock file says of its holder (``host pid``; empty when unknown)."""
        try:
            return self.path.read_text(errors="replace").strip()
        except OSError:
            return ""

    def release(self) -> None:
        """Let the lock go (closing the file releases the ``flock``)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

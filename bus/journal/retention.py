"""Retention: the oldest segments deleted once the journal is too large or they are too old
(PROTOCOL.md section 8).

:func:`expired` decides from what is known of the segments without reading their records
(sizes, and the creation time of the segment after each: every record of a segment was written
before the next one was created); :func:`apply_retention` deletes what it names, each ``.seg``
with its ``.idx``. The newest segment, the one being written, is never deleted, so a journal
keeps at least its current segment whatever the limits. Sequence numbers are not reused: after
retention the journal's first record is above 1, which readers do not report as damage.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

from bus.journal.segments import SegmentInfo, index_path, list_segments, segment_info

__all__ = ["apply_retention", "expired"]

log = logging.getLogger("bus.journal")


def expired(
    infos: Sequence[SegmentInfo], max_bytes: int, max_age: float, now: float
) -> list[SegmentInfo]:
    """The oldest segments to delete, oldest first.

    Args:
        infos: the journal's segments, oldest first (the last is the one being written).
        max_bytes: bytes of segments kept at most (0: no limit).
        max_age: seconds a segment is kept after its last record was written, about: a segment
            goes once the segment after it was created longer ago than this (0: no limit).
        now: the time, epoch seconds.
    """
    total = sum(info.size for info in infos)
    gone: list[SegmentInfo] = []
    for i, info in enumerate(infos[:-1]):
        later = infos[i + 1].header
        too_old = max_age > 0 and later is not None and later.created < now - max_age
        too_big = max_bytes > 0 and total > max_bytes
        if not (too_old or too_big):
            break
        gone.append(info)
        total -= info.size
    return gone


def apply_retention(
    directory: str | os.PathLike[str], max_bytes: int, max_age: float, now: float
) -> list[Path]:
    """Delete the segments :func:`expired` names (and their indexes); returns their paths.

    A file that cannot be deleted is logged and left; the others still go.
    """
    if max_bytes <= 0 and max_age <= 0:
        return []
    infos = [segment_info(path) for path in list_segments(Path(directory))]
    deleted = []
    for info in expired(infos, max_bytes, max_age, now):
        try:
            info.path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("journal retention: cannot delete %s: %s", info.path, exc.strerror)
            break  # never leave a gap: an older segment kept and a newer one gone
        index_path(info.path).unlink(missing_ok=True)
        deleted.append(info.path)
    if deleted:
        log.info(
            "journal retention: deleted %d segment(s) up to %s", len(deleted), deleted[-1].name
        )
    return deleted

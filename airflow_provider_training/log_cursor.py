"""Where a pod's log was emitted up to: its lines' timestamps, and a cursor that lets a re-read resume.

Lines are read with timestamps (``timestamps=true``); the cursor (the last timestamp emitted and how many
lines carried it) makes every re-read, after a dropped connection, a container restart or a triggerer restart,
resume without loss or duplicates. Used by the trigger's replica log streaming (``logs.py``) and the Training
tab's log follows.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime
from functools import lru_cache

_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$")


def stamp_key(stamp: str) -> int | None:
    """An RFC 3339 (nano) timestamp as integer nanoseconds since the epoch; ``None`` if it is not one."""
    match = _STAMP.match(stamp)
    if match is None:
        return None
    return _epoch_seconds(match[1], match[3]) * 1_000_000_000 + int((match[2] or "").ljust(9, "0"))


# A log's lines come many to a second: each second is parsed and formatted once (what a busy follow spends
# most of its time on otherwise).
@lru_cache(maxsize=256)
def _epoch_seconds(moment: str, zone: str) -> int:
    return int(datetime.fromisoformat(moment + ("+00:00" if zone == "Z" else zone)).timestamp())


@lru_cache(maxsize=256)
def _second_text(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def split_stamp(line: str) -> tuple[int | None, str]:
    """``"<timestamp> text"`` (``timestamps=true``) into the timestamp key and the text."""
    stamp, _, text = line.partition(" ")
    key = stamp_key(stamp)
    return (key, text) if key is not None else (None, line)


def stamp_text(key: int) -> str:
    """A timestamp key as the ISO text of a log record's ``timestamp`` (microseconds, ``Z``)."""
    seconds, nanos = divmod(key, 1_000_000_000)
    return f"{_second_text(seconds)}.{nanos // 1000:06d}Z"


class LogCursor:
    """How far a pod's log has been emitted: the last timestamp and how many emitted lines carry it.

    ``[key, count]`` (:meth:`state`) is what a trigger persists, so that its next instance (after a triggerer
    restart) resumes the pod's log where this one stopped.
    """

    __slots__ = ("count", "key")

    def __init__(self, state: Sequence[int] | None = None) -> None:
        self.key: int | None = int(state[0]) if state else None
        self.count = int(state[1]) if state else 0

    def state(self) -> list[int] | None:
        return None if self.key is None else [self.key, self.count]

    def since(self) -> datetime | None:
        """Where a re-read starts (the API takes whole seconds; :meth:`session` drops what was emitted)."""
        if self.key is None:
            return None
        return datetime.fromtimestamp(self.key // 1_000_000_000, UTC)

    def session(self) -> Session:
        """A filter for one read from :meth:`since`: called with each line's timestamp key, ``True`` for a
        line not emitted before; or :meth:`Session.take` for many lines at once."""
        return Session(self)

    def add(self, key: int | None, lines: int) -> None:
        """Count ``lines`` more lines stamped ``key`` as emitted (``None``: not stamped, not counted)."""
        if key is None:
            return
        if self.key is None or key > self.key:
            self.key, self.count = key, lines
        else:
            self.count += lines

    def advance(self, lines: Sequence[str]) -> None:
        """Count ``lines`` (``"<timestamp> <text>"`` each, in order) as emitted: only the last ones, those
        sharing the last timestamp, are parsed."""
        key, run, same = None, 0, ""
        for line in reversed(lines):
            if key is not None and line.startswith(same):
                run += 1
                continue
            stamp = line.partition(" ")[0]
            found = stamp_key(stamp)
            if key is None:  # lines after the last stamped one are not counted, as the filter has it
                if found is not None:
                    key, run, same = found, 1, stamp + " "
            elif found == key:
                run += 1
            else:
                break
        self.add(key, run)


class Session:
    """:meth:`LogCursor.session`'s filter."""

    __slots__ = ("cursor", "emitting", "repeats", "start_count", "start_key")

    def __init__(self, cursor: LogCursor) -> None:
        self.cursor = cursor
        self.start_key, self.start_count = cursor.key, cursor.count
        self.repeats = 0
        self.emitting = False  # a line of this read was new: the lines after it are new too

    def __call__(self, key: int | None) -> bool:
        if key is None:
            return True
        start_key = self.start_key
        if start_key is not None and key <= start_key:
            if key < start_key:
                return False
            self.repeats += 1
            if self.repeats <= self.start_count:
                return False
        self.cursor.add(key, 1)
        return True

    def take(self, lines: Sequence[str]) -> int:
        """Of one read's next lines (``"<timestamp> <text>"`` each, in order): how many at their start were
        emitted before; the rest count as emitted now. A line's timestamp is parsed only where it matters:
        the first lines of a re-read, up to the first new one (they may repeat what was emitted), and the
        last ones (the cursor's position)."""
        skipped = 0
        if not self.emitting:
            for line in lines:
                if self(stamp_key(line.partition(" ")[0])):  # new: counted
                    self.emitting = True
                    break
                skipped += 1
            lines = lines[skipped + 1 :]
        self.cursor.advance(lines)
        return skipped

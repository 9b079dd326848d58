"""The API server's clock as this machine sees it, from the ``Date`` header of the server's answers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime


class ServerClock:
    """The API server's clock, as this machine sees it: its own, moved by how far the ``Date`` header of the
    server's latest answer was from it when the answer came (whole seconds; unmoved until one came). What a
    client compares with the server's timestamps (``creationTimestamp``) must be read from this, not from the
    local clock, which may be minutes off."""

    __slots__ = ("known", "offset")

    def __init__(self) -> None:
        self.offset = 0.0  # seconds the server's clock is ahead of this machine's
        self.known = False  # whether an answer's Date header has set it

    def saw(self, date: str | None) -> None:
        """Take the ``Date`` header of an answer that just came (an unreadable one changes nothing)."""
        try:
            server = parsedate_to_datetime(date) if date else None
        except (TypeError, ValueError):
            return
        if server is not None and server.tzinfo is not None:
            self.offset, self.known = (server - datetime.now(UTC)).total_seconds(), True

    def now(self) -> datetime:
        return datetime.now(UTC) + timedelta(seconds=self.offset)

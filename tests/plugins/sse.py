"""A reader of the Training tab's server-sent events, for tests."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

Event = tuple[str, str | None, dict[str, Any]]


def sse_events(lines: Iterable[str], until: int | None = None) -> Iterator[Event]:
    """``(event, id, data)`` of a stream's lines until it ends, its ``end`` event, or ``until`` lines."""
    event, event_id, seen = "message", None, 0
    for line in lines:
        if line.startswith("event: "):
            event = line.removeprefix("event: ")
        elif line.startswith("id: "):
            event_id = line.removeprefix("id: ")
        elif line.startswith("data: "):
            yield event, event_id, json.loads(line.removeprefix("data: "))
            seen += event == "line"
            if event == "end" or (until is not None and seen >= until):
                return
            event, event_id = "message", None

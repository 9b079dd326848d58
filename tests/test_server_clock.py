"""ServerClock: the API server's clock from its answers' Date header (issue 27, point 7)."""

from __future__ import annotations

from datetime import UTC, datetime

from airflow_provider_training.server_clock import ServerClock


def test_the_date_header_sets_the_servers_now():
    clock = ServerClock()

    clock.saw("Mon, 01 Jan 2024 00:00:00 GMT")

    assert clock.now().date() == datetime(2024, 1, 1, tzinfo=UTC).date()


def test_a_missing_or_unreadable_date_changes_nothing():
    clock = ServerClock()
    clock.saw("Mon, 01 Jan 2024 00:00:00 GMT")
    offset = clock.offset

    for header in (None, "", "yesterday", "Mon, 01 Jan 2024 00:00:00"):  # the last one has no zone
        clock.saw(header)

    assert clock.offset == offset

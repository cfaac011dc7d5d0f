"""Pure pieces of the deployer: uptime from docker's timestamps, readiness parsing."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from generator.deploy.operate import _model_ids, _seconds, _since


def started(ago: timedelta) -> str:
    """StartedAt as docker writes it: RFC 3339 with nanoseconds."""
    return (datetime.now(timezone.utc) - ago).strftime("%Y-%m-%dT%H:%M:%S") + ".123456789Z"


def test_uptime_shows_the_two_largest_units():
    assert _since(started(timedelta(seconds=40))) in ("40s", "41s")
    assert _since(started(timedelta(hours=1, minutes=2, seconds=5))) == "1h 2m"
    assert _since(started(timedelta(days=3, hours=4, minutes=1))) == "3d 4h"
    assert _since("0001-01-01T00:00:00Z") == "-"  # docker's zero time: never started
    assert _since(None) == "-" and _since("garbage") == "-"


def test_served_models_and_durations():
    assert _model_ids(b'{"object":"list","data":[{"id":"tiny"},{"id":"other"}]}') == {"tiny", "other"}
    assert _model_ids(b"not json") == set() and _model_ids(b'{"data": 3}') == set()
    assert _seconds("90s") == 90 and _seconds("2m") == 120 and _seconds("1m30s") == 90 and _seconds("500ms") == 1

"""A pytest plugin that scores an assignment's tests: points per test and the reason a test failed.

Tests carry `@pytest.mark.points(n)` (1 by default). Each test runs under a time limit
(`MINIEAGLE_TEST_SECONDS`, 60 s by default), so a submission that loops forever loses that test
instead of hanging the grader. With `MINIEAGLE_SCORE_FILE` set, the results are written there as
JSON: one record per test with its name, points, whether it passed and the first line of what it
raised (the test's own message says where the mistake is).
"""

from __future__ import annotations

import json
import os
import signal

import pytest

DEFAULT_SECONDS = 60


def pytest_configure(config):
    config.addinivalue_line("markers", "points(n): what the test is worth (default 1)")
    config._assignment_results = {}


def pytest_collection_modifyitems(session, config, items):
    for item in items:
        marker = item.get_closest_marker("points")
        points = int(marker.args[0]) if marker else 1
        config._assignment_results[item.nodeid] = {
            "test": item.name,
            "doc": (item.obj.__doc__ or "").strip().split("\n")[0] if hasattr(item, "obj") else "",
            "points": points,
            "passed": False,
            "message": "not run",
        }


class TestTimeLimit(Exception):
    """A test ran over its time limit."""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    seconds = int(os.environ.get("MINIEAGLE_TEST_SECONDS", DEFAULT_SECONDS))

    def _expired(signum, frame):
        raise TestTimeLimit(f"ran over {seconds} s: an endless loop, or far too much work?")

    previous = signal.signal(signal.SIGALRM, _expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _reason(report) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    # "AssertionError: the message\nassert ..." -> "the message"; keep other exception names
    text = text.split("\nassert ")[0].strip()
    if text.startswith("AssertionError: "):
        text = text[len("AssertionError: ") :]
    return text


def pytest_runtest_logreport(report):
    results = _results_of(report)
    if results is None or report.nodeid not in results:
        return
    record = results[report.nodeid]
    if report.when == "call" and report.passed:
        record.update(passed=True, message="")
    elif report.failed:
        record.update(passed=False, message=_reason(report))
    elif report.skipped:
        record.update(passed=False, message="skipped")


_CONFIG = None


def pytest_sessionstart(session):
    global _CONFIG
    _CONFIG = session.config


def _results_of(report):
    return None if _CONFIG is None else _CONFIG._assignment_results


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("MINIEAGLE_SCORE_FILE")
    if path:
        with open(path, "w", encoding="utf-8") as file:
            json.dump(list(session.config._assignment_results.values()), file, indent=1)

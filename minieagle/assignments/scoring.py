"""A pytest plugin that lists an assignment's tests with their points.

Tests carry `@pytest.mark.points(n)` (1 by default). With `MINIEAGLE_SCORE_FILE` set, the
collected tests are written there as JSON: one record per test with its id, name, points and the
first paragraph of its docstring. The grader collects the tests this way in the instructor's
environment, so the points and the list of tests never come from the process that runs the
submission; a student's `python -m pytest` uses it only for the marker.
"""

from __future__ import annotations

import json
import os


def pytest_configure(config):
    config.addinivalue_line("markers", "points(n): what the test is worth (default 1)")
    config._assignment_tests = []


def pytest_collection_modifyitems(session, config, items):
    for item in items:
        marker = item.get_closest_marker("points")
        doc = getattr(item, "obj", None).__doc__ if hasattr(item, "obj") else None
        doc = " ".join((doc or "").strip().split("\n\n")[0].split())  # its first paragraph
        config._assignment_tests.append(
            {
                "id": item.nodeid,
                "test": item.name,
                "doc": doc,
                "points": int(marker.args[0]) if marker else 1,
            }  # fmt: skip
        )


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("MINIEAGLE_SCORE_FILE")
    if path:
        with open(path, "w", encoding="utf-8") as file:
            json.dump(session.config._assignment_tests, file, indent=1)

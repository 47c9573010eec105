"""The container tier: collected everywhere, run only by `bash tests/containers/run.sh` (see test_image.py)."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "containers: the worker image built and run with testcontainers (tests/containers/run.sh)"
    )

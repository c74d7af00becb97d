"""Shared fixtures of the Python module's tests (ctest python.pytest sets both variables):
PYTHONPATH=<build>/python (the in-tree module) and JACOND_BIN=<build>/experiments/jacond."""

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def jacond_bin():
    """The jacond binary the tests compare with; the tests that need it skip without JACOND_BIN."""
    value = os.environ.get("JACOND_BIN")
    if not value:
        pytest.skip("JACOND_BIN is not set (e.g. JACOND_BIN=build/experiments/jacond): "
                    "these tests compare with runs of the jacond binary")
    path = Path(value)
    if not path.is_absolute() and not path.exists():
        path = REPO / path
    if not path.is_file():
        pytest.fail(f"JACOND_BIN={value}: no such file")
    return str(path)

"""Shared fixtures: a database path, the collector's warnings, a fake NVML; app_fixtures.py adds the dashboard's.

Helpers that are not fixtures live in helpers.py, fake_nvml.py and fixture_datasets.py, imported by name.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_nvml import FakeNvml
from helpers import REPO

from collector.errors import CollectorWarning

pytest_plugins = ["app_fixtures"]

if str(REPO) not in sys.path:  # app/ is not an installed package: the tests import it from this checkout
    sys.path.insert(0, str(REPO))
os.environ.setdefault("STALLWATCH_TEST", "1")


@pytest.fixture
def db_path(tmp_path: Path) -> str:
    return str(tmp_path / "stallwatch.sqlite")


@pytest.fixture
def collector_warnings() -> Iterator[list[warnings.WarningMessage]]:
    """Every CollectorWarning raised while the test runs (from any thread)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CollectorWarning)
        yield caught


@pytest.fixture
def fake_nvml() -> FakeNvml:
    return FakeNvml()


@pytest.fixture(autouse=True)
def _restore_main_module() -> Iterator[None]:
    """AppTest swaps sys.modules['__main__'] for the app script; spawn workers need the real one back."""
    main = sys.modules.get("__main__")
    yield
    if main is not None:
        sys.modules["__main__"] = main

"""The one SparkSession of the test run (session-scoped: a cold start costs ~10 s)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A local[2] SparkSession with the ``busjournal`` source registered."""
    from pipeline.session import spark_session

    session = spark_session("local[2]", "busgate-tests", shuffle_partitions=2, quick_start=True)
    yield session
    session.stop()

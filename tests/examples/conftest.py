"""The examples' ``flwr run`` environments: Flower's local SuperLink, started here by PID.

Each fixture is one SuperLink for the whole session (``flower_run.local_superlink``),
shared by every test that runs an app through it; its teardown stops it and all it
spawned, by PID.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.examples.flower_run import local_superlink


@pytest.fixture(scope="session")
def flower(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Environment of ``flwr run``, with Flower's local SuperLink started here, by PID.

    Flower's per-run dependency install is off: the apps run in this environment.
    """
    yield from local_superlink(tmp_path_factory.mktemp("example") / "flwr-home")


@pytest.fixture(scope="session")
def flower_installing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """As ``flower``, with Flower's per-run dependency install on, and no package index.

    Each run's ``uv sync`` installs the app's dependencies into a fresh environment
    under FLWR_HOME; ``UV_NO_INDEX=1``: from local paths and direct URLs only, never an
    index; uv's cache is FLWR_HOME's ``uv-cache``.
    """
    yield from local_superlink(
        tmp_path_factory.mktemp("installing") / "flwr-home", runtime_install=True
    )

"""Shared test fixtures: a reply builder and a Flower-free environment."""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from unittest.mock import Mock

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict
from flwr.app.error import Error

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION", "1")
os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")
# Partition files (fairfl.data.cache) go to a folder of this test session, shared with the
# processes the tests start, never to the user's ~/.cache/fairfl.
if "FAIRFL_CACHE_DIR" not in os.environ:
    _cache = tempfile.mkdtemp(prefix="fairfl-test-cache-")
    os.environ["FAIRFL_CACHE_DIR"] = _cache
    atexit.register(shutil.rmtree, _cache, ignore_errors=True)


#: Loggers whose level a command run in-process sets for its process (fairfl's CLI:
#: ``fairfl`` at WARNING without ``-v``); restored after each test, so that no test's
#: caplog depends on which tests ran before it.
_LEVELLED_LOGGERS = ("fairfl", "fairfl.server", "flwr")


@pytest.fixture(autouse=True)
def _restore_logger_levels() -> Iterator[None]:
    levels = {name: logging.getLogger(name).level for name in _LEVELLED_LOGGERS}
    yield
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


def arrays_of(values: Mapping[str, np.ndarray] | Sequence[np.ndarray]) -> ArrayRecord:
    """An ArrayRecord with keys '0', '1', ... for a list, or the mapping's keys."""
    if isinstance(values, Mapping):
        return ArrayRecord({k: Array(np.asarray(v)) for k, v in values.items()})
    return ArrayRecord({str(i): Array(np.asarray(v)) for i, v in enumerate(values)})


def make_reply(
    node_id: int,
    arrays: ArrayRecord | Sequence[np.ndarray] | None = None,
    metrics: Mapping[str, object] | None = None,
    *,
    error: str | None = None,
    content: RecordDict | None = None,
) -> Mock:
    """A reply Message mock with ``metadata.src_node_id`` set (a real one needs a run)."""
    message = Mock(spec=Message)
    message.metadata.src_node_id = node_id
    message.has_error.return_value = error is not None
    if error is not None:
        message.error = Error(code=0, reason=error)
        return message
    if content is None:
        content = RecordDict()
        if arrays is not None:
            content["arrays"] = arrays if isinstance(arrays, ArrayRecord) else arrays_of(arrays)
        if metrics is not None:
            content["metrics"] = MetricRecord(dict(metrics))  # type: ignore[arg-type]
    message.content = content
    return message


@pytest.fixture
def reply_builder():
    return make_reply


#: Hostile replies the registry-wide hostile tests sent (tests/strategies/
#: test_hostile_payloads.py) and the rounds among them that raised: the session's last
#: line says both, summed over pytest-xdist's workers, so CI's log shows the count.
HOSTILE_REPLIES = pytest.StashKey[dict[str, int]]()


def _hostile_counts(config: pytest.Config) -> dict[str, int]:
    return config.stash.setdefault(HOSTILE_REPLIES, {"tried": 0, "crashes": 0})


@pytest.fixture
def hostile_count(request: pytest.FixtureRequest) -> dict[str, int]:
    """The session's count of hostile replies tried and of rounds that raised on them."""
    return _hostile_counts(request.config)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """In an xdist worker: hand the worker's count to the controller."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None and HOSTILE_REPLIES in session.config.stash:
        output["hostile-replies"] = dict(session.config.stash[HOSTILE_REPLIES])


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    """In the xdist controller: add up each finished worker's count."""
    counts = getattr(node, "workeroutput", {}).get("hostile-replies")
    if counts:
        total = _hostile_counts(node.config)  # type: ignore[attr-defined]
        for key in total:
            total[key] += int(counts[key])


def pytest_terminal_summary(terminalreporter: object, config: pytest.Config) -> None:
    """``hostile replies: N tried, M crashes`` when the session sent any."""
    counts = config.stash.get(HOSTILE_REPLIES, None)
    if counts and counts["tried"]:
        terminalreporter.write_line(  # type: ignore[attr-defined]
            f"hostile replies: {counts['tried']} tried, {counts['crashes']} crashes"
        )


@pytest.fixture(scope="session")
def shared_data_root() -> Path:
    """The published data files beside the repository (``../shared/data``), not the network."""
    root = Path(__file__).resolve().parents[1].parent / "shared" / "data"
    if not root.is_dir():
        pytest.fail(f"the shared data folder {root} is missing: tests of real data read it")
    return root

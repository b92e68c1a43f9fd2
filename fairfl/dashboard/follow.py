"""Follow runs' results files as they grow: incremental, tolerant, never raising.

A :class:`RunFollower` reads one run folder's ``rounds.jsonl`` from the byte offset it
reached last time, so a refresh costs only the new lines. A last line without its
newline (a round being written, or a run killed mid-write) is kept back until the
newline arrives; a line that is not a JSON object, or an object without a round number,
is skipped and recorded as a :class:`Note` the page shows. A file that shrank or was
rewritten (a resumed or overwritten run) is read again from the start; a gzipped
``rounds.jsonl.gz`` (``fairfl compare --compress-runs``) is read whole whenever it
changes. ``summary.json`` tells when a run has ended, and how.

The per-round curves are :func:`curve_metrics` of the round's clients (the functions
:func:`fairfl.metrics.fairness_metrics` uses), recomputed like ``fairfl report`` does.

A :class:`Source` is one folder named on the command line: a run's out-dir, or a
``fairfl compare`` output folder (``manifest.json`` with ``runs/<variant>/seed-<s>/``),
or any folder with ``rounds.jsonl`` files below it. A folder that does not exist yet is
waited for; runs that appear later (a comparison's next run) are picked up.

The files are read here rather than through :mod:`fairfl.report.results`: importing
that package loads matplotlib (:mod:`fairfl.report.plots`), and the dashboard must
start quickly on a server host with only the core package and
the ``dashboard`` extra. The conventions are the same: a client's key is its
``partition_id`` (its ``node_id`` where the run recorded none), and accuracies stay
fractions in [0, 1] until a figure shows them in percent.
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fairfl._gzip import gunzip_bounded
from fairfl.contract.sensitive import pooled_group_metrics
from fairfl.dashboard.labels import run_label
from fairfl.metrics import jain_index, worst_fraction_mean

ROUNDS_FILE = "rounds.jsonl"
ROUNDS_FILE_GZ = "rounds.jsonl.gz"
SUMMARY_FILE = "summary.json"
MANIFEST_FILE = "manifest.json"
ERROR_FILE = "error.txt"
#: Files whose presence makes a folder a single run's out-dir.
RUN_MARKERS = (ROUNDS_FILE, ROUNDS_FILE_GZ, SUMMARY_FILE, "checkpoint.npz")

#: Run states shown on the page.
WAITING = "waiting"
RUNNING = "running"
COMPLETED = "completed"
FAILED = "failed"

#: The metrics plotted per round, in this order.
CURVE_METRICS = ("acc-mean", "acc-worst-10", "acc-worst-20", "acc-std", "jain-index")
#: Plotted too for runs whose clients recorded ``group_counts`` (a sensitive attribute):
#: the pooled predictions' demographic-parity and equalised-odds gaps.
GROUP_CURVE_METRICS = ("dp-diff", "eo-diff")
#: Plotted too for runs whose clients recorded a personal model's accuracy (Ditto): the
#: mean and worst 10 % of the personal models' client accuracies.
PERSONAL_CURVE_METRICS = ("personal-acc-mean", "personal-acc-worst-10")

#: How many bytes of the file's start identify it (a rewritten file differs there).
_HEAD_BYTES = 256

_SEED_DIR = re.compile(r"seed-(?P<seed>\d+)")


@dataclass(frozen=True)
class Note:
    """A line the follower skipped or holds back, shown on the page.

    Parameters
    ----------
    path : Path
        The file.
    line : int
        Line number (1-based) in the file.
    message : str
        What is wrong with it.
    """

    path: Path
    line: int
    message: str

    def text(self) -> str:
        """``<path>:<line>: <message>``."""
        return f"{self.path}:{self.line}: {self.message}"


@dataclass(frozen=True)
class RoundData:
    """The parts of one ``rounds.jsonl`` line the dashboard shows.

    Parameters
    ----------
    round : int
        The server round.
    clients : NDArray[np.int64]
        Client keys (partition id, else node id) of the clients that were evaluated.
    accuracy : NDArray[np.float64]
        Their test accuracies, fractions in [0, 1] (NaN where not recorded).
    num_examples : NDArray[np.float64]
        Their test-set sizes (NaN where not recorded).
    metrics : dict[str, float]
        :func:`curve_metrics` of the evaluated clients (empty if none), and
        :data:`GROUP_CURVE_METRICS` of their pooled ``group_counts`` when recorded.
    weights : dict[int, float]
        Aggregation weight of each aggregated client, by client key.
    scalars : dict[str, float | str]
        The rule's scalar diagnostics (numbers, and strings such as ``qp-status``).
    per_client : dict[str, dict[int, float]]
        The rule's per-client diagnostics (``rcfl-q``, ``clusters``), by client key.
    sampled : dict[str, int]
        Nodes sampled for ``train`` and ``evaluate``.
    accepted : int | None
        Train replies aggregated (None when the round recorded no training).
    train_dropped : dict[str, str]
        Dropped train replies: node id -> reason.
    evaluate_dropped : dict[str, str]
        Dropped evaluate replies: node id -> reason.
    skipped : str | None
        Why the round's aggregate was not applied, if it was not.
    failed : str | None
        Why the round could use no client's train reply, if it could not.
    silenced : list[int]
        Clients (partition ids, else node ids) the aggregation used at weight 0.
    wall_time : float | None
        Seconds since the run started.
    """

    round: int
    clients: NDArray[np.int64]
    accuracy: NDArray[np.float64]
    num_examples: NDArray[np.float64]
    metrics: dict[str, float]
    weights: dict[int, float] = field(default_factory=dict)
    scalars: dict[str, float | str] = field(default_factory=dict)
    per_client: dict[str, dict[int, float]] = field(default_factory=dict)
    sampled: dict[str, int] = field(default_factory=dict)
    accepted: int | None = None
    train_dropped: dict[str, str] = field(default_factory=dict)
    evaluate_dropped: dict[str, str] = field(default_factory=dict)
    skipped: str | None = None
    failed: str | None = None
    silenced: list[int] = field(default_factory=list)
    wall_time: float | None = None


class EntryError(ValueError):
    """A ``rounds.jsonl`` line that parsed as JSON but cannot be shown."""


def curve_metrics(accuracy: NDArray[np.float64]) -> dict[str, float]:
    """The plotted metrics (:data:`CURVE_METRICS`) of one round's client accuracies.

    Computed by the functions :func:`fairfl.metrics.fairness_metrics` uses (population
    std, the mean of the floor(10 %·n) and floor(20 %·n) worst clients, at least one,
    Jain's index), so they equal its values; the other metrics are not needed here. A
    missing accuracy (NaN) makes the round's statistics NaN, as in ``fairfl report``.
    """
    with np.errstate(all="ignore"):
        return {
            "acc-mean": float(accuracy.mean()),
            "acc-worst-10": worst_fraction_mean(accuracy, 0.1),
            "acc-worst-20": worst_fraction_mean(accuracy, 0.2),
            "acc-std": float(accuracy.std()),
            "jain-index": jain_index(accuracy),
        }


def _number(value: Any) -> float:
    """A finite or NaN float from a JSON value (null, strings and the like give NaN)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return math.nan
    try:
        return float(value)
    except OverflowError:  # an integer beyond float range
        return math.inf if value > 0 else -math.inf


#: Client keys and counts must fit a signed 64-bit integer (NumPy's int64).
_INT64 = 2**63


def _count(value: Any) -> int | None:
    """A whole number from a JSON number that fits int64 (None for anything else)."""
    number = _number(value)
    return int(number) if math.isfinite(number) and abs(number) < _INT64 else None


def _client_key(item: Mapping[str, Any]) -> int | None:
    key = item.get("partition_id")
    if key is None:
        key = item.get("node_id")
    if isinstance(key, str):
        try:
            key = int(key)
        except ValueError:
            return None
        return key if abs(key) < _INT64 else None
    return _count(key)


def _reasons(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        return {}
    return {str(k): str(v) for k, v in value.items()}


def parse_entry(entry: Any) -> RoundData:
    """Extract what the page shows from one parsed ``rounds.jsonl`` line.

    Unknown keys are ignored; missing or mistyped optional parts give empty values.
    Per-client diagnostics are keyed by node id in the file and re-keyed here by client
    key, through the node -> partition pairs of the round's clients and weights.

    Raises
    ------
    EntryError
        If the line is not a JSON object or has no integer ``round``.
    """
    if not isinstance(entry, Mapping):
        raise EntryError(f"must be a JSON object, got {type(entry).__name__}")
    number = entry.get("round")
    if isinstance(number, bool) or not isinstance(number, int):
        raise EntryError(f"'round' must be an integer, got {number!r}")
    node_to_key: dict[str, int] = {}
    keys: list[int] = []
    accuracy: list[float] = []
    examples: list[float] = []
    group_counts: list[list[int]] = []
    personal: list[float] = []
    raw_clients = entry.get("clients")
    for item in raw_clients if isinstance(raw_clients, list) else []:
        if not isinstance(item, Mapping) or (key := _client_key(item)) is None:
            continue
        node_to_key[str(item.get("node_id"))] = key
        keys.append(key)
        accuracy.append(_number(item.get("eval_acc")))
        examples.append(_number(item.get("num_examples")))
        if item.get("personal_eval_acc") is not None:
            personal.append(_number(item.get("personal_eval_acc")))
        counts = item.get("group_counts")
        if isinstance(counts, list) and all(type(c) is int for c in counts):
            group_counts.append(counts)
    raw_train = entry.get("train")
    train: Mapping[str, Any] = raw_train if isinstance(raw_train, Mapping) else {}
    weights: dict[int, float] = {}
    raw_weights = train.get("weights")
    for item in raw_weights if isinstance(raw_weights, list) else []:
        if not isinstance(item, Mapping) or (key := _client_key(item)) is None:
            continue
        node_to_key.setdefault(str(item.get("node_id")), key)
        weights[key] = _number(item.get("weight"))
    scalars: dict[str, float | str] = {}
    per_client: dict[str, dict[int, float]] = {}
    diagnostics = train.get("diagnostics")
    for name, value in (diagnostics if isinstance(diagnostics, Mapping) else {}).items():
        if isinstance(value, str):
            scalars[str(name)] = value
        elif isinstance(value, bool):
            scalars[str(name)] = float(value)
        elif isinstance(value, int | float):
            scalars[str(name)] = _number(value)
        elif isinstance(value, Mapping):
            by_client: dict[int, float] = {}
            for node, v in value.items():
                key = node_to_key.get(str(node), _client_key({"node_id": node}))
                if key is not None:
                    by_client[key] = _number(v)
            per_client[str(name)] = by_client
    sampled = entry.get("sampled")
    accepted = train.get("accepted")
    skipped = train.get("skipped")
    wall_time = entry.get("wall_time")
    accuracies = np.asarray(accuracy, dtype=np.float64)
    metrics = curve_metrics(accuracies) if keys else {}
    if group_counts:
        try:
            pooled = pooled_group_metrics(group_counts)[0]
        except ValueError:  # counts the contract would refuse: no group curves
            pooled = {}
        metrics.update({m: pooled[m] for m in GROUP_CURVE_METRICS if m in pooled})
    if personal:  # Ditto: the personal models' statistics
        mine = curve_metrics(np.asarray(personal, dtype=np.float64))
        metrics.update({f"personal-{m}": mine[m] for m in ("acc-mean", "acc-worst-10")})
    return RoundData(
        round=number,
        clients=np.asarray(keys, dtype=np.int64),
        accuracy=accuracies,
        num_examples=np.asarray(examples, dtype=np.float64),
        metrics=metrics,
        weights=weights,
        scalars=scalars,
        per_client=per_client,
        sampled={
            str(k): count
            for k, v in (sampled.items() if isinstance(sampled, Mapping) else ())
            if (count := _count(v)) is not None
        },
        accepted=_count(accepted) if train else None,
        train_dropped=_reasons(train.get("dropped")),
        evaluate_dropped=_reasons(entry.get("evaluate_dropped")),
        skipped=str(skipped) if skipped else None,
        failed=_failure(entry.get("failed")),
        silenced=_silenced(train.get("silenced")),
        wall_time=_number(wall_time) if math.isfinite(_number(wall_time)) else None,
    )


def _failure(failed: object) -> str | None:
    """A round's ``failed`` reason (``rounds.jsonl``), or None if it did not fail."""
    if not isinstance(failed, Mapping):
        return None
    return str(failed.get("reason") or "no client's train reply could be used")


def _silenced(silenced: object) -> list[int]:
    """A round's ``train.silenced`` clients (int ids; anything else is left out)."""
    items = silenced if isinstance(silenced, list) else []
    return [int(k) for k in items if isinstance(k, int) and not isinstance(k, bool)]


def _read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object file, or None if absent, unreadable or not an object."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


class RunFollower:
    """Follows one run folder: its ``rounds.jsonl`` by byte offset, and ``summary.json``.

    Parameters
    ----------
    path : Path
        The run's out-dir (it may not exist yet).
    label : str
        The run's name on the page.
    config : Mapping[str, Any] | None
        The run config known before ``summary.json`` exists (a comparison's manifest).
    named : bool (default: True)
        Whether ``label`` names the run; if not (a folder), :attr:`label` is the rule and
        the keys the user set (:func:`~fairfl.dashboard.labels.run_label`) once known.
    """

    def __init__(
        self,
        path: Path,
        label: str,
        config: Mapping[str, Any] | None = None,
        *,
        named: bool = True,
    ):
        self.path = path
        self._label = label
        self._named = named
        #: The rule the ``rounds.jsonl`` lines name (``strategy``), once one is read.
        self.rule: str | None = None
        self.planned_config = dict(config or {})
        self.rounds: list[RoundData] = []
        self.notes: list[Note] = []
        self.pending: Note | None = None
        self.summary: dict[str, Any] | None = None
        self.error: str | None = None
        #: Bumped whenever what the page shows changed.
        self.version = 0
        self._file: Path | None = None
        self._head: bytes | None = None
        self._offset = 0
        self._line = 0
        self._run_id: str | None = None
        self._summary_stamp: tuple[int, int] | None = None
        self._gz_stamp: tuple[int, int] | None = None

    # ------------------------------------------------------------------ state

    @property
    def status(self) -> str:
        """:data:`WAITING`, :data:`RUNNING`, :data:`COMPLETED` or :data:`FAILED`."""
        if self.error is not None:
            return FAILED
        if self.summary is not None:
            return FAILED if self.summary.get("status") == FAILED else COMPLETED
        return RUNNING if self.rounds or self._file is not None else WAITING

    @property
    def label(self) -> str:
        """The run's name: as given, else its rule and keys (by its folder until known)."""
        summary = self.summary or {}
        rule = summary.get("strategy") or self.rule
        if self._named or not isinstance(rule, str):
            return self._label
        given = summary.get("config_given")
        return run_label(rule, given if isinstance(given, Mapping) else {})

    @property
    def config(self) -> dict[str, Any]:
        """The run config: ``summary.json``'s once written, else the planned one."""
        if self.summary is not None and isinstance(self.summary.get("config"), dict):
            return dict(self.summary["config"])
        return dict(self.planned_config)

    def all_notes(self) -> list[Note]:
        """Skipped lines, then the held-back last line (if any)."""
        return [*self.notes, *([self.pending] if self.pending else [])]

    # ---------------------------------------------------------------- reading

    def refresh(self) -> bool:
        """Read what is new; True if anything shown changed. Never raises for bad files."""
        before = (self.version, len(self.rounds), self.status, len(self.all_notes()))
        try:
            self._refresh_rounds()
            self._refresh_summary()
        except OSError as error:  # a file vanished or became unreadable mid-read
            self._note(self._file or self.path, self._line + 1, f"cannot read: {error}")
        except ValueError as error:  # a .gz too large to expand, or not gzip at all
            self._note(self._file or self.path, 1, f"not shown: {error}")
        changed = before != (self.version, len(self.rounds), self.status, len(self.all_notes()))
        if changed:
            self.version += 1
        return changed

    def _rounds_file(self) -> Path | None:
        plain = self.path / ROUNDS_FILE
        if plain.is_file():
            return plain
        gzipped = self.path / ROUNDS_FILE_GZ
        return gzipped if gzipped.is_file() else None

    def _reset(self, path: Path | None) -> None:
        self._file = path
        self._head = None
        self._offset = 0
        self._line = 0
        self._run_id = None
        self._gz_stamp = None
        self.rounds = []
        self.notes = []
        self.pending = None
        self.version += 1

    def _refresh_rounds(self) -> None:
        path = self._rounds_file()
        if path != self._file:
            self._reset(path)
        if path is None:
            return
        if path.suffix == ".gz":
            stat = path.stat()
            stamp = (stat.st_mtime_ns, stat.st_size)
            if stamp != self._gz_stamp:
                data = gunzip_bounded(path)
                self._reset(path)
                self._gz_stamp = stamp
                self._consume(data, final=True)
            return
        with path.open("rb") as handle:
            head = handle.read(_HEAD_BYTES)
            size = os.fstat(handle.fileno()).st_size
            known = self._head
            if known is not None and (size < self._offset or head[: len(known)] != known):
                self._reset(path)  # rewritten: a resumed or overwritten run
            self._head = head
            if size == self._offset:
                return
            handle.seek(self._offset)
            data = handle.read(size - self._offset)
        self._offset += self._consume(data, final=False)

    def _consume(self, data: bytes, *, final: bool) -> int:
        """Parse the complete lines of ``data``; return how many bytes they took."""
        assert self._file is not None
        used = 0
        self.pending = None
        while used < len(data):
            end = data.find(b"\n", used)
            if end < 0:
                tail = data[used:]
                if tail.strip():
                    what = "truncated last line skipped" if final else "last line incomplete"
                    self.pending = Note(
                        self._file,
                        self._line + 1,
                        f"{what} ({len(tail)} bytes without a newline)"
                        + ("" if final else ": shown once the run finishes writing it"),
                    )
                if final:
                    used = len(data)
                break
            line = data[used:end]
            used = end + 1
            self._line += 1
            if line.strip():
                self._parse_line(line)
        return used

    def _parse_line(self, line: bytes) -> None:
        assert self._file is not None
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError) as error:  # UnicodeDecodeError is a ValueError
            message = error.msg if isinstance(error, json.JSONDecodeError) else str(error)
            self._note(self._file, self._line, f"skipped: not valid JSON ({message})")
            return
        try:
            parsed = parse_entry(entry)
        except EntryError as error:
            self._note(self._file, self._line, f"skipped: {error}")
            return
        if isinstance(entry.get("strategy"), str):
            self.rule = entry["strategy"]
        run_id = entry.get("run_id")
        if isinstance(run_id, str):
            if self._run_id is not None and run_id != self._run_id:
                self._note(
                    self._file,
                    self._line,
                    f"a new run ({run_id}) follows run {self._run_id}: showing the new one",
                )
                self.rounds = []
            self._run_id = run_id
        while self.rounds and self.rounds[-1].round >= parsed.round:
            self.rounds.pop()  # a resumed run writes its rounds again
        self.rounds.append(parsed)

    def _note(self, path: Path, line: int, message: str) -> None:
        self.notes.append(Note(path, line, message))

    def _refresh_summary(self) -> None:
        error_file = self.path / ERROR_FILE
        if error_file.is_file():
            lines = error_file.read_text(encoding="utf-8", errors="replace").strip().splitlines()
            self.error = lines[-1] if lines else "failed (error.txt is empty)"
        path = self.path / SUMMARY_FILE
        try:
            stat = path.stat()
        except FileNotFoundError:
            self.summary, self._summary_stamp = None, None
            return
        stamp = (stat.st_mtime_ns, stat.st_size)
        if stamp == self._summary_stamp:
            return
        summary = _read_json(path)
        if summary is None:
            return  # being written: read it next time
        self._summary_stamp = stamp
        run_id = summary.get("run_id")
        if self._run_id is not None and isinstance(run_id, str) and run_id != self._run_id:
            self.summary = None  # an earlier run's summary: not this run's outcome
            return
        self.summary = summary
        if summary.get("status") == FAILED and summary.get("error"):
            self.error = str(summary["error"])


class Source:
    """One folder named on the command line, and the runs found in it.

    Parameters
    ----------
    path : Path
        A run's out-dir, a ``fairfl compare`` output folder, or any folder with
        ``rounds.jsonl`` files below it; it may not exist yet.
    """

    def __init__(self, path: Path):
        self.path = path
        self.manifest: dict[str, Any] | None = None
        self.runs: dict[Path, RunFollower] = {}
        self._manifest_stamp: tuple[int, int] | None = None

    @property
    def kind(self) -> str:
        """``"waiting"`` (no folder yet), ``"run"``, ``"comparison"`` or ``"folder"``."""
        if not self.path.is_dir():
            return WAITING
        if self.manifest is not None:
            return "comparison"
        if any((self.path / marker).exists() for marker in RUN_MARKERS):
            return "run"
        return "folder"

    def refresh(self) -> bool:
        """Find new runs, then read every run's new lines; True if anything changed."""
        changed = self._discover()
        for follower in self.runs.values():
            changed = follower.refresh() or changed
        return changed

    def _discover(self) -> bool:
        if not self.path.is_dir():
            return False
        found = len(self.runs)
        manifest_path = self.path / MANIFEST_FILE
        if manifest_path.is_file():
            stat = manifest_path.stat()
            stamp = (stat.st_mtime_ns, stat.st_size)
            if stamp != self._manifest_stamp:
                manifest = _read_json(manifest_path)
                if manifest is not None:
                    self.manifest, self._manifest_stamp = manifest, stamp
            if self.manifest is not None:
                self._add_manifest_runs(self.manifest)
                return len(self.runs) != found
        if any((self.path / marker).exists() for marker in RUN_MARKERS):
            if self.path not in self.runs:
                self.runs[self.path] = RunFollower(self.path, self.path.resolve().name, named=False)
        else:
            for rounds in sorted(self.path.rglob(f"{ROUNDS_FILE}*")):
                run_dir = rounds.parent
                if rounds.name in (ROUNDS_FILE, ROUNDS_FILE_GZ) and run_dir not in self.runs:
                    self.runs[run_dir] = RunFollower(run_dir, self._label(run_dir), named=False)
        return len(self.runs) != found

    def _add_manifest_runs(self, manifest: Mapping[str, Any]) -> None:
        runs = manifest.get("runs")
        for run in runs if isinstance(runs, list) else []:
            if not isinstance(run, Mapping) or not isinstance(run.get("dir"), str):
                continue
            run_dir = self.path / run["dir"]
            if run_dir not in self.runs:
                label = f"{run.get('label', run['dir'])} seed {run.get('seed', '?')}"
                config = run.get("config") if isinstance(run.get("config"), Mapping) else {}
                self.runs[run_dir] = RunFollower(run_dir, label, config)

    def _label(self, run_dir: Path) -> str:
        match = _SEED_DIR.fullmatch(run_dir.name)
        if match is not None and run_dir.parent != self.path:
            return f"{run_dir.parent.name} seed {match['seed']}"
        return str(run_dir.relative_to(self.path))


class Registry:
    """Every source of a dashboard, refreshed at most every ``min_interval`` seconds.

    Thread-safe: the web server calls :meth:`refresh` from its request threads.

    Parameters
    ----------
    folders : list[Path]
        The folders named on the command line.
    min_interval : float
        Seconds between two reads of the files (requests in between see the last read).
    """

    def __init__(self, folders: list[Path], *, min_interval: float = 0.5):
        if not folders:
            raise ValueError("folders must name at least one out-dir, got none")
        self.sources = [Source(Path(folder)) for folder in folders]
        self.min_interval = min_interval
        self.version = 0
        self._lock = threading.Lock()
        self._last: float | None = None

    def refresh(self, now: float) -> int:
        """Read what is new (unless read less than ``min_interval`` ago); the version."""
        with self._lock:
            if self._last is not None and now - self._last < self.min_interval:
                return self.version
            self._last = now
            changed = False
            for source in self.sources:
                changed = source.refresh() or changed
            if changed:
                self.version += 1
            return self.version

    def runs(self) -> dict[str, RunFollower]:
        """Every run found, by a unique name: its label, prefixed by its source if needed."""
        with self._lock:
            followers = [(s, f) for s in self.sources for f in s.runs.values()]
        labels = [f.label for _, f in followers]
        runs: dict[str, RunFollower] = {}
        for source, follower in followers:
            key = follower.label
            if labels.count(key) > 1 or key in runs:
                key = f"{source.path}: {follower.label}"
            while key in runs:
                key = f"{key}'"
            runs[key] = follower
        return runs

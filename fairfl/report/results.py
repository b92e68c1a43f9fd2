"""Read saved runs back: ``rounds.jsonl`` per run, grouped by rule variant and seed.

A comparison folder (written by ``fairfl compare``) holds ``manifest.json`` and one
folder per run, ``runs/<variant>/seed-<s>/`` with the run's ``rounds.jsonl`` and
``summary.json``. :func:`load_runs` reads the runs the manifest lists; without a
manifest it finds every ``rounds.jsonl`` below the folder and names each run by its
folders (``<variant>/seed-<s>/rounds.jsonl``; the seed may also come from
``summary.json``), so hand-made or copied results can be reported too.

Everything is read from inside the folder: a manifest entry or a file (a symlink
included) that resolves outside it is refused (:func:`inside`), so a copied or
downloaded comparison cannot make ``fairfl report`` read other files. A gzipped
``rounds.jsonl.gz`` is decompressed in a stream that stops at
:data:`MAX_ROUNDS_BYTES` (a small ``.gz`` cannot expand without bound).

Accuracies are read and returned as fractions in [0, 1] (``eval_acc``, as every results
file holds them); only the Markdown tables and plots show percent.
"""

from __future__ import annotations

import gzip
import json
import logging
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fairfl._gzip import MAX_ROUNDS_BYTES, gunzip_bounded
from fairfl.contract.sensitive import pooled_group_metrics
from fairfl.metrics import fairness_metrics

logger = logging.getLogger(__name__)

MANIFEST_FILE = "manifest.json"
ROUNDS_FILE = "rounds.jsonl"
ROUNDS_FILE_GZ = "rounds.jsonl.gz"
SUMMARY_FILE = "summary.json"
ERROR_FILE = "error.txt"

_SEED_DIR = re.compile(r"seed-(?P<seed>\d+)")


class OutsideFolderError(ValueError):
    """A path the results name resolves outside the folder being read."""


def inside(root: Path, path: Path, what: str) -> Path:
    """``path`` resolved (symlinks followed), if it lies within ``root``'s resolved path.

    Raises
    ------
    OutsideFolderError
        Naming ``what`` (``manifest.json runs[2].dir``, ...), the path and the folder.
    """
    folder, real = root.resolve(), path.resolve()
    if real != folder and not real.is_relative_to(folder):
        raise OutsideFolderError(
            f"{what} {path} resolves to {real}, outside {folder}: results are read only "
            "from inside the folder reported on"
        )
    return real


@dataclass(frozen=True)
class RunResult:
    """One finished (or failed) run of one rule variant with one seed.

    Parameters
    ----------
    label : str
        The variant's name in tables and plots (``"semivred[beta=0.5]"``).
    rule : str
        Registry name of the rule (``"semivred"``).
    seed : int
        The run's ``seed`` (partition, split, initial model and client shuffling).
    path : Path
        The run's folder.
    rounds : list[dict]
        The parsed lines of ``rounds.jsonl`` (empty when the run failed).
    error : str | None
        Why the run has no results, if it has none.
    """

    label: str
    rule: str
    seed: int
    path: Path
    rounds: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the run has an evaluated round with finite accuracies."""
        final = self.final_accuracies()
        return bool(final) and all(math.isfinite(a) for a in final.values())

    def evaluated_rounds(self) -> list[dict[str, Any]]:
        """The rounds that have client evaluations, in order."""
        return [entry for entry in self.rounds if entry.get("clients")]

    def final_accuracies(self) -> dict[int, float]:
        """Each client's test accuracy (a fraction) in the last evaluated round, by partition id.

        Clients are keyed by ``partition_id``, or by ``node_id`` when the run did not
        record partitions. A missing (non-finite, stored as null) accuracy is NaN.
        """
        evaluated = self.evaluated_rounds()
        return client_accuracies(evaluated[-1]) if evaluated else {}

    def final_metrics(self) -> dict[str, float]:
        """Fairness metrics of the last evaluated round (:func:`round_metrics`)."""
        evaluated = self.evaluated_rounds()
        return round_metrics(evaluated[-1]) if evaluated else {}


def client_accuracies(entry: dict[str, Any]) -> dict[int, float]:
    """Client accuracies (fractions) of one ``rounds.jsonl`` entry, keyed by partition id."""
    accuracies: dict[int, float] = {}
    for client in entry.get("clients", []):
        key = client.get("partition_id")
        if key is None:
            key = client["node_id"]
        value = client.get("eval_acc")
        accuracies[int(key)] = math.nan if value is None else float(value)
    return accuracies


def round_metrics(entry: dict[str, Any]) -> dict[str, float]:
    """Fairness metrics of one round, recomputed from its clients (accuracies as fractions).

    Uses :func:`fairfl.metrics.fairness_metrics`, and, where clients recorded
    ``group_counts``, :func:`fairfl.contract.sensitive.pooled_group_metrics` (``dp-diff``
    and the other group-fairness differences); where clients recorded a personal model's
    ``personal_eval_acc`` (Ditto), the same statistics of the personal models under
    ``personal-`` names (``personal-acc-mean``). Recomputing (rather than reading the
    stored ``metrics``) keeps one definition for runs written by any version, and for
    hand-written files.
    """
    clients = entry.get("clients", [])
    if not clients:
        return {}
    accuracies = [math.nan if c.get("eval_acc") is None else c["eval_acc"] for c in clients]
    losses = [math.nan if c.get("eval_loss") is None else c["eval_loss"] for c in clients]
    counts = [int(c.get("num_examples") or 1) for c in clients]
    metrics = fairness_metrics(accuracies, counts, losses)
    # Each client's own accuracy, for tables by client (FLamby's per-hospital columns).
    metrics.update({f"acc-client-{key}": value for key, value in client_accuracies(entry).items()})
    group_counts = [c["group_counts"] for c in clients if c.get("group_counts")]
    if group_counts:
        metrics.update(pooled_group_metrics(group_counts)[0])
    epsilon = ((entry.get("train") or {}).get("diagnostics") or {}).get("dp-epsilon")
    if epsilon is not None:  # central DP (fairfl.privacy): ε so far at the run's δ
        metrics["dp-epsilon"] = float(epsilon)
    personal = [c for c in clients if c.get("personal_eval_acc") is not None]
    if personal:  # Ditto: the same statistics over the personal models, "personal-" first
        stats = fairness_metrics(
            [c["personal_eval_acc"] for c in personal],
            [int(c.get("num_examples") or 1) for c in personal],
            [
                math.nan if c.get("personal_eval_loss") is None else c["personal_eval_loss"]
                for c in personal
            ],
        )
        metrics.update({f"personal-{name}": value for name, value in stats.items()})
    return metrics


def read_rounds(path: Path, *, max_bytes: int = MAX_ROUNDS_BYTES) -> list[dict[str, Any]]:
    """Parse a ``rounds.jsonl`` file, or a gzipped ``rounds.jsonl.gz`` (blank lines skipped).

    Parameters
    ----------
    path : Path
        The file.
    max_bytes : int
        Decompressed-size limit of a ``.gz`` file (:data:`MAX_ROUNDS_BYTES`).

    Raises
    ------
    ValueError
        If a line is not a JSON object (the message names the file and line), or a
        ``.gz`` file is corrupt or decompresses to more than ``max_bytes``.
    """
    raw = gunzip_bounded(path, max_bytes) if path.suffix == ".gz" else path.read_bytes()
    entries = []
    for number, line in enumerate(raw.decode("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}:{number} is not valid JSON: {error.msg}") from error
        if not isinstance(entry, dict):
            raise ValueError(f"{path}:{number} must be a JSON object, got {type(entry).__name__}")
        entries.append(entry)
    return entries


def read_run(path: Path, *, label: str, rule: str, seed: int) -> RunResult:
    """Load one run folder; a folder without ``rounds.jsonl`` gives a failed run.

    Raises
    ------
    OutsideFolderError
        If its ``rounds.jsonl`` or ``error.txt`` is a symlink out of the run's folder.
    """
    rounds_file = rounds_path(path)
    error_file = path / ERROR_FILE
    for name in (rounds_file, error_file):
        if name.is_symlink() or name.exists():
            inside(path, name, "run file")
    rounds = read_rounds(rounds_file) if rounds_file.is_file() else []
    error: str | None = None
    if error_file.is_file():
        lines = error_file.read_text(encoding="utf-8").strip().splitlines()
        error = lines[-1] if lines else "failed"
    elif not rounds:
        error = f"no {ROUNDS_FILE} in {path}"
    return RunResult(label=label, rule=rule, seed=seed, path=path, rounds=rounds, error=error)


def rounds_path(run_dir: Path) -> Path:
    """The run's ``rounds.jsonl``, or its gzipped form when only that exists."""
    plain = run_dir / ROUNDS_FILE
    gzipped = run_dir / ROUNDS_FILE_GZ
    return gzipped if gzipped.is_file() and not plain.is_file() else plain


def compress_rounds(run_dir: Path) -> Path:
    """Replace a run's ``rounds.jsonl`` by ``rounds.jsonl.gz`` (about 10x smaller)."""
    plain = run_dir / ROUNDS_FILE
    gzipped = run_dir / ROUNDS_FILE_GZ
    gzipped.write_bytes(gzip.compress(plain.read_bytes(), mtime=0))
    plain.unlink()
    return gzipped


def read_manifest(folder: Path) -> dict[str, Any] | None:
    """The comparison's ``manifest.json``, or None if the folder has none.

    Raises
    ------
    OutsideFolderError
        If ``manifest.json`` is a symlink to a file outside ``folder``.
    """
    manifest = folder / MANIFEST_FILE
    if not manifest.is_file():
        return None
    inside(folder, manifest, MANIFEST_FILE)
    parsed: dict[str, Any] = json.loads(manifest.read_text(encoding="utf-8"))
    return parsed


def load_runs(folder: Path) -> list[RunResult]:
    """Every run of a comparison folder, in the manifest's order.

    Parameters
    ----------
    folder : Path
        A ``fairfl compare`` output folder, or any folder with ``rounds.jsonl`` files
        below it.

    Raises
    ------
    FileNotFoundError
        If the folder has neither a manifest nor any ``rounds.jsonl``.
    OutsideFolderError
        If a run the manifest lists, or a results file, resolves outside the folder.
    """
    manifest = read_manifest(folder)
    if manifest is not None:
        runs = manifest["runs"]
        for index, run in enumerate(runs):
            inside(folder, folder / str(run["dir"]), f"{MANIFEST_FILE} runs[{index}].dir")
        return [
            read_run(
                folder / run["dir"], label=run["label"], rule=run["rule"], seed=int(run["seed"])
            )
            for run in runs
        ]
    files = sorted({rounds_path(p.parent) for p in folder.rglob("rounds.jsonl*")})
    files = [p for p in files if p.is_file()]
    for path in files:
        inside(folder, path, "results file")
    if not files:
        raise FileNotFoundError(f"no {MANIFEST_FILE} and no {ROUNDS_FILE} below {folder}")
    runs = []
    for rounds_file in files:
        run_dir = rounds_file.parent
        summary = _read_summary(run_dir)
        config = summary.get("config", {}) if summary else {}
        match = _SEED_DIR.fullmatch(run_dir.name)
        if match is not None and run_dir != folder:
            label_dir = run_dir.parent
            seed = int(match["seed"])
        else:
            label_dir = run_dir
            seed = int(config.get("seed", 0))
        label = label_dir.name if label_dir != folder else str(config.get("strategy", "run"))
        rule = str(config.get("strategy", re.split(r"[\[_]", label)[0]))
        runs.append(read_run(run_dir, label=label, rule=rule, seed=seed))
    return runs


def _read_summary(run_dir: Path) -> dict[str, Any] | None:
    path = run_dir / SUMMARY_FILE
    if not path.is_file():
        return None
    inside(run_dir, path, "run file")
    try:
        summary: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        logger.warning("load_runs: ignoring unreadable %s", path)
        return None
    return summary


def group_by_label(runs: Sequence[RunResult]) -> dict[str, list[RunResult]]:
    """Runs grouped by variant label, labels in first-seen order, seeds sorted."""
    groups: dict[str, list[RunResult]] = {}
    for run in runs:
        groups.setdefault(run.label, []).append(run)
    return {label: sorted(group, key=lambda r: r.seed) for label, group in groups.items()}


def metric_curve(run: RunResult, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """``(rounds, values)`` of one fairness metric over a run's evaluated rounds."""
    evaluated = run.evaluated_rounds()
    rounds = np.array([entry["round"] for entry in evaluated], dtype=np.int64)
    values = np.array([round_metrics(entry)[metric] for entry in evaluated], dtype=np.float64)
    return rounds, values


def weight_matrix(run: RunResult) -> tuple[np.ndarray, list[int], np.ndarray]:
    """Aggregation weights λ of a run by round and client, from ``train.weights``.

    Returns
    -------
    rounds : np.ndarray
        The rounds that recorded weights.
    clients : list[int]
        Partition ids (node ids where the partition is unknown), sorted.
    weights : np.ndarray
        ``len(clients) x len(rounds)``; NaN where a client was not aggregated.
    """
    per_round: list[tuple[int, dict[int, float]]] = []
    for entry in run.rounds:
        weights = (entry.get("train") or {}).get("weights") or []
        if not weights:
            continue
        row = {}
        for item in weights:
            key = item.get("partition_id")
            key = item["node_id"] if key is None else key
            row[int(key)] = math.nan if item.get("weight") is None else float(item["weight"])
        per_round.append((int(entry["round"]), row))
    clients = sorted({c for _, row in per_round for c in row})
    matrix = np.full((len(clients), len(per_round)), np.nan)
    for j, (_, row) in enumerate(per_round):
        for i, client in enumerate(clients):
            if client in row:
                matrix[i, j] = row[client]
    return np.array([r for r, _ in per_round], dtype=np.int64), clients, matrix

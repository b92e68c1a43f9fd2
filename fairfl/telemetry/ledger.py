"""A hash-chained ``rounds.jsonl``: each line names the SHA-256 of the line before it.

Every line a :class:`~fairfl.telemetry.stream.RecordStream` writes carries two keys:

``prev_sha256``
    The SHA-256 (hex) of the previous line's bytes (UTF-8, without its newline);
    :data:`GENESIS` (64 zeros) on the first line.
``config_sha256``
    The run's config fingerprint: the ``sha256`` of
    :func:`fairfl.server.checkpoint.run_fingerprint` for fairfl's ServerApp, or
    :func:`config_fingerprint` of the run config for the drop-in wrapper.

``summary.json`` holds ``ledger``: the number of lines and the SHA-256 of the last one,
so that cutting whole lines off the end is caught too, and (fairfl's ServerApp,
:func:`seal_summary`) ``summary_sha256``, the SHA-256 of the summary itself without
that field, so that an edited summary is caught as well. :func:`verify_ledger` walks the
chain and names the first round whose line was altered, removed or cut short
(``fairfl verify <out-dir>``). The chain proves integrity against edits after the
fact, not authorship: whoever can rewrite the whole file can rewrite the whole chain
(sign or ship the head hash elsewhere, e.g. to a tracker, to pin it).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fairfl._gzip import gunzip_bounded

#: ``prev_sha256`` of the first line.
GENESIS = "0" * 64
PREV_KEY = "prev_sha256"
CONFIG_KEY = "config_sha256"
#: ``summary.json`` key with ``{"lines": n, "head_sha256": hex[, "summary_sha256": hex]}``.
SUMMARY_KEY = "ledger"
#: Field of the ledger head that seals ``summary.json`` (:func:`seal_summary`).
SEAL_KEY = "summary_sha256"


def encode_line(entry: Mapping[str, Any]) -> str:
    """The one text a round entry is written as (no newline); its hash is of these bytes."""
    return json.dumps(entry)


def json_safe(value: Any) -> Any:
    """``value`` with NaN/Inf floats as ``None`` (strict JSON) and dict keys as strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def line_sha256(line: str) -> str:
    """SHA-256 (hex) of one ``rounds.jsonl`` line without its newline."""
    return hashlib.sha256(line.encode("utf-8")).hexdigest()


def config_fingerprint(run_config: Mapping[str, Any]) -> str:
    """SHA-256 of a run config as sorted JSON (the wrapper's fingerprint)."""
    text = json.dumps({str(k): v for k, v in run_config.items()}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def chain(entry: Mapping[str, Any], prev_sha256: str, config_sha256: str) -> dict[str, Any]:
    """``entry`` with the ledger keys set (a new dict; ``entry`` is not changed)."""
    return {**entry, PREV_KEY: prev_sha256, CONFIG_KEY: config_sha256}


def summary_sha256(summary: Mapping[str, Any]) -> str:
    """SHA-256 of a summary as sorted JSON, leaving out the seal itself."""
    head = summary.get(SUMMARY_KEY)
    unsealed = dict(summary)
    if isinstance(head, Mapping):
        unsealed[SUMMARY_KEY] = {k: v for k, v in head.items() if k != SEAL_KEY}
    text = json.dumps(json_safe(unsealed), sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def seal_summary(summary: Mapping[str, Any]) -> dict[str, Any]:
    """``summary`` with its own SHA-256 in the ledger head (``ledger.summary_sha256``).

    The summary must already hold the ledger head (``RoundLog.finish`` writes it).
    Values go through :func:`json_safe` first, so the hash is of what JSON keeps.
    """
    safe = json.loads(json.dumps(json_safe(dict(summary))))
    head = dict(safe.get(SUMMARY_KEY) or {})
    head[SEAL_KEY] = summary_sha256(safe)
    return {**safe, SUMMARY_KEY: head}


@dataclass(frozen=True)
class LedgerReport:
    """What :func:`verify_ledger` found.

    Attributes
    ----------
    ok : bool
        Whether the chain holds.
    rounds : int
        Lines that passed before the first problem (all of them when ``ok``).
    problem : str | None
        The first problem, naming the round: tampered, missing or truncated.
    round : int | None
        The round the problem is in (``None`` when ``ok``, or no round can be named).
    summary_missing : bool
        The chain holds but ``summary.json`` is absent: the run did not finish (stopped
        or killed mid-run), or the summary was deleted. Nothing checks the chain's last
        line then, so rounds cut off at the end would go unseen.
    """

    ok: bool
    rounds: int
    problem: str | None = None
    round: int | None = None
    summary_missing: bool = False


def ledger_file(out_dir: Path) -> Path:
    """``out_dir/rounds.jsonl``, or its gzipped copy when only that exists."""
    plain = out_dir / "rounds.jsonl"
    gzipped = out_dir / "rounds.jsonl.gz"
    if not plain.exists() and gzipped.exists():
        return gzipped
    if not plain.exists():
        raise FileNotFoundError(f"{out_dir} holds no rounds.jsonl (nor rounds.jsonl.gz)")
    return plain


def _fail(rounds: int, round_: int | None, problem: str) -> LedgerReport:
    return LedgerReport(ok=False, rounds=rounds, problem=problem, round=round_)


def verify_ledger(out_dir: Path) -> LedgerReport:
    """Check the hash chain of ``out_dir/rounds.jsonl`` (and its head in ``summary.json``).

    The first problem is reported:

    - a line that is not a JSON object, or has no newline at the end of the file: that
      round is *truncated* (or the byte flipped broke its JSON);
    - a line without the ledger keys;
    - a ``prev_sha256`` that is not the hash of the line before: the line before was
      *tampered* with, or lines between them are *missing* (the round numbers say which);
    - a ``config_sha256`` that differs from the first line's (the settings changed
      mid-run, e.g. a ``resume-force``);
    - a ``summary.json`` whose ledger head is not the last line: the last line was
      tampered with, or rounds are missing at the end;
    - a sealed ``summary.json`` (:func:`seal_summary`) whose content no longer matches
      its seal: the summary was edited. A summary without a seal (written by the
      drop-in wrapper, or before seals) is checked for its head only.

    A run that ``fairfl compare --compress-runs`` gzipped is read from
    ``rounds.jsonl.gz`` (the same bytes).

    Raises
    ------
    FileNotFoundError
        If ``out_dir`` has neither ``rounds.jsonl`` nor ``rounds.jsonl.gz``.
    """
    path = ledger_file(out_dir)
    try:
        raw = gunzip_bounded(path) if path.suffix == ".gz" else path.read_bytes()
    except ValueError as error:  # too large to expand, or not gzip: nothing to verify
        return LedgerReport(ok=False, rounds=0, problem=str(error))
    pieces = raw.split(b"\n")
    complete, tail = pieces[:-1], pieces[-1]
    previous_hash = GENESIS
    previous_round: int | None = None
    first_config: str | None = None
    for index, piece in enumerate(complete):
        expected_round = (previous_round or 0) + 1
        try:
            line = piece.decode("utf-8")
            entry = json.loads(line)
        except ValueError:
            return _fail(
                index,
                expected_round,
                f"line {index + 1} (round {expected_round}?) is not valid JSON: "
                "tampered or truncated",
            )
        if not isinstance(entry, dict) or PREV_KEY not in entry or CONFIG_KEY not in entry:
            return _fail(
                index,
                expected_round,
                f"line {index + 1} (round {expected_round}?) carries no ledger keys "
                f"({PREV_KEY}, {CONFIG_KEY}): written without a ledger, or tampered",
            )
        round_ = entry.get("round")
        if entry[PREV_KEY] != previous_hash:
            if isinstance(round_, int) and previous_round is not None and round_ > expected_round:
                missing = ", ".join(str(r) for r in range(expected_round, round_))
                return _fail(
                    index, expected_round, f"round(s) {missing} missing before round {round_}"
                )
            if previous_round is None:
                return _fail(
                    index,
                    round_ if isinstance(round_, int) else None,
                    f"round {round_}: the first line does not start the chain "
                    f"({PREV_KEY} is not {GENESIS[:8]}...): earlier rounds missing",
                )
            return _fail(
                index,
                previous_round,
                f"round {previous_round} was tampered with: its line's SHA-256 is not the "
                f"{PREV_KEY} that round {round_} recorded",
            )
        if first_config is None:
            first_config = entry[CONFIG_KEY]
        elif entry[CONFIG_KEY] != first_config:
            return _fail(
                index,
                round_ if isinstance(round_, int) else None,
                f"round {round_}: {CONFIG_KEY} {entry[CONFIG_KEY]} differs from the first "
                f"line's {first_config} (the run's settings changed mid-run)",
            )
        previous_hash = line_sha256(line)
        previous_round = round_ if isinstance(round_, int) else expected_round
    if tail:
        expected_round = (previous_round or 0) + 1
        return _fail(
            len(complete),
            expected_round,
            f"round {expected_round} is truncated: the last line of {path.name} has no "
            "newline (cut off mid-write or by hand)",
        )
    summary_path = out_dir / "summary.json"
    if not summary_path.exists():
        return LedgerReport(ok=True, rounds=len(complete), summary_missing=True)
    try:
        summary = json.loads(summary_path.read_text(encoding="utf-8"))
    except ValueError:
        return _fail(len(complete), None, f"{summary_path.name} is not valid JSON")
    head = summary.get(SUMMARY_KEY) if isinstance(summary, dict) else None
    if isinstance(head, dict):
        lines = head.get("lines")
        if isinstance(lines, int) and lines > len(complete):
            first_missing = (previous_round or 0) + 1
            return _fail(
                len(complete),
                first_missing,
                f"round {first_missing} is missing: {summary_path.name} records "
                f"{lines} lines, {path.name} has {len(complete)} (truncated)",
            )
        if head.get("head_sha256") != previous_hash:
            return _fail(
                len(complete) - 1,
                previous_round,
                f"round {previous_round} was tampered with: the last line's SHA-256 "
                f"is not the head {summary_path.name} recorded",
            )
        if SEAL_KEY in head and head[SEAL_KEY] != summary_sha256(summary):
            return _fail(
                len(complete),
                None,
                f"{summary_path.name} was edited after the run wrote it: its content "
                f"does not match the {SUMMARY_KEY}.{SEAL_KEY} it was sealed with",
            )
    return LedgerReport(ok=True, rounds=len(complete))

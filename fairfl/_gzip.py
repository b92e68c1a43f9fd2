"""Bounded decompression of results files (a small ``.gz`` must not expand without end).

One reader for ``fairfl report``, ``fairfl verify`` and the dashboard, which all read a
``rounds.jsonl.gz`` that ``fairfl compare --compress-runs`` wrote, or that came from
elsewhere.
"""

from __future__ import annotations

import gzip
from pathlib import Path

#: Largest ``rounds.jsonl`` a reader decompresses from a ``rounds.jsonl.gz``: 1 GiB.
#: A 1,000-round run of 1,000 clients writes about 300 MB; beyond the cap the file is
#: refused (a decompression bomb, or not a run's results).
MAX_ROUNDS_BYTES = 1 << 30

_CHUNK = 1 << 20


def gunzip_bounded(path: Path, max_bytes: int = MAX_ROUNDS_BYTES) -> bytes:
    """``path`` decompressed, read in 1 MiB chunks that stop once past ``max_bytes``.

    Raises
    ------
    ValueError
        If it decompresses to more than ``max_bytes``, or is not a readable gzip file.
    """
    chunks, total = [], 0
    try:
        with gzip.open(path, "rb") as stream:
            while chunk := stream.read(_CHUNK):
                total += len(chunk)
                if total > max_bytes:
                    raise ValueError(
                        f"{path} decompresses to more than {max_bytes} bytes, the limit "
                        "for a rounds file (fairfl._gzip.MAX_ROUNDS_BYTES): refused as not "
                        "a run's results"
                    )
                chunks.append(chunk)
    except (OSError, EOFError) as error:  # gzip.BadGzipFile is an OSError
        raise ValueError(f"{path} is not a readable gzip file: {error}") from error
    return b"".join(chunks)

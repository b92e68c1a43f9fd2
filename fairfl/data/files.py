"""Published data files read from a local root, each checked against its publisher's MD5.

Data sets that no package bundles (UCI Heart Disease's four hospitals, UCI Adult) are read
from ``<data_root>/<folder>/``, laid out as the publisher serves the files, or each one
gzip-compressed (``adult.data.gz``): the digest is always that of the published bytes, so
a compressed copy verifies against the same MD5 as the original. Nothing is downloaded
unless asked (``download=true``): a missing file is an error that says where to get it and
where to put it, and a file whose digest differs is refused, naming it and both digests.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

#: Largest data file read: 64 MiB (the files here are at most 4 MB; a larger one, or a
#: ``.gz`` that expands beyond it, is not the published file).
MAX_FILE_BYTES = 64 << 20
#: Seconds a ``download=true`` fetch of one file may take before it is abandoned.
DOWNLOAD_TIMEOUT_S = 60.0


class DataFileError(ValueError):
    """A data file that is not the published one (wrong digest, unreadable, too large)."""


@dataclass(frozen=True)
class DataFile:
    """One published file.

    Parameters
    ----------
    name : str
        Its name as published (``"adult.data"``).
    md5 : str
        MD5 of the published bytes (for a ``.gz`` copy: of the decompressed bytes).
    url : str
        Where the publisher serves it.
    """

    name: str
    md5: str
    url: str


@dataclass(frozen=True)
class DataSource:
    """The files of one data set, kept in one folder of the data root.

    Parameters
    ----------
    dataset : str
        The ``dataset`` run-config value that reads them, for messages.
    folder : str
        Their folder under the data root (``"uci-adult"``).
    files : tuple[DataFile, ...]
        The files.
    page : str
        The publisher's page of the data set (its licence and citation).
    """

    dataset: str
    folder: str
    files: tuple[DataFile, ...]
    page: str


def read_verified(
    source: DataSource, data_root: str | Path, *, download: bool = False
) -> dict[str, bytes]:
    """Every file of ``source``, as published, after checking its MD5.

    Parameters
    ----------
    source : DataSource
        The data set's files.
    data_root : str | Path
        The data root; the files are read from ``<data_root>/<source.folder>/``, each as
        ``<name>`` or ``<name>.gz``.
    download : bool (default: False)
        Fetch missing files from their URL into that folder first (then verify them).

    Returns
    -------
    dict[str, bytes]
        Each file's published (decompressed) bytes, by its name.

    Raises
    ------
    FileNotFoundError
        If a file is missing and ``download`` is false: the message names the folder,
        each missing file with its URL, and the ``download=true`` option.
    DataFileError
        If a file's digest is not the published one (the message names the file, the
        expected and the actual MD5), or it cannot be read or decompressed.
    """
    folder = Path(data_root).expanduser() / source.folder
    missing = [f for f in source.files if _stored_path(folder, f) is None]
    if missing and download:
        for file in missing:
            _download(file, folder)
        missing = []
    if missing:
        listing = "; ".join(f"{f.name} from {f.url}" for f in missing)
        raise FileNotFoundError(
            f"dataset {source.dataset!r} reads its files from {folder}, which lacks "
            f"{', '.join(f.name for f in missing)}. Download {listing} (see {source.page}) "
            f"and put them in {folder} (plain or gzip-compressed as <name>.gz), or set "
            "download=true to fetch and verify them"
        )
    contents: dict[str, bytes] = {}
    for file in source.files:
        path = _stored_path(folder, file)
        assert path is not None  # every missing file was fetched or reported above
        contents[file.name] = _verified_bytes(path, file)
    return contents


def _stored_path(folder: Path, file: DataFile) -> Path | None:
    for candidate in (folder / file.name, folder / f"{file.name}.gz"):
        if candidate.is_file():
            return candidate
    return None


def _verified_bytes(path: Path, file: DataFile) -> bytes:
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as stream:
                data = stream.read(MAX_FILE_BYTES + 1)
        else:
            with path.open("rb") as stream:
                data = stream.read(MAX_FILE_BYTES + 1)
    except (OSError, EOFError) as error:  # a truncated .gz is EOFError or BadGzipFile
        raise DataFileError(
            f"{path} cannot be read as {file.name} ({error}); expected the published file "
            f"with MD5 {file.md5}"
        ) from error
    if len(data) > MAX_FILE_BYTES:
        raise DataFileError(
            f"{path} holds more than {MAX_FILE_BYTES} bytes: not the published {file.name} "
            f"(MD5 {file.md5})"
        )
    digest = hashlib.md5(data, usedforsecurity=False).hexdigest()
    if digest != file.md5:
        raise DataFileError(
            f"{path} is not the published {file.name}: its MD5 is {digest}, expected "
            f"{file.md5} (a truncated, edited or different file; download it again from "
            f"{file.url})"
        )
    return data


def _download(file: DataFile, folder: Path) -> None:
    """Fetch ``file`` into ``folder``, verified before it takes its name."""
    folder.mkdir(parents=True, exist_ok=True)
    descriptor, partial = tempfile.mkstemp(dir=folder, prefix=f".{file.name}.", suffix=".part")
    try:
        with (
            os.fdopen(descriptor, "wb") as out,
            urllib.request.urlopen(file.url, timeout=DOWNLOAD_TIMEOUT_S) as response,
        ):
            out.write(response.read(MAX_FILE_BYTES + 1))
        _verified_bytes(Path(partial), file)
        os.replace(partial, folder / file.name)
    finally:
        Path(partial).unlink(missing_ok=True)

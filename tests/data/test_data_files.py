"""Published data files: read plain or gzip-compressed, MD5-checked, never fetched unasked."""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path

import pytest

from fairfl.data.files import DataFile, DataFileError, DataSource, read_verified

CONTENT = b"63.0,1.0,1.0,145.0,233.0,1.0,2.0,150.0,0.0,2.3,3.0,0.0,6.0,0\n"
MD5 = hashlib.md5(CONTENT).hexdigest()


def _source(url: str = "https://archive.ics.uci.edu/example/one.data") -> DataSource:
    return DataSource(
        dataset="example",
        folder="uci-example",
        files=(DataFile(name="one.data", md5=MD5, url=url),),
        page="https://archive.ics.uci.edu/dataset/0/example",
    )


def test_a_plain_file_is_read_and_verified(tmp_path: Path) -> None:
    (tmp_path / "uci-example").mkdir()
    (tmp_path / "uci-example" / "one.data").write_bytes(CONTENT)
    assert read_verified(_source(), tmp_path) == {"one.data": CONTENT}


def test_a_gzip_copy_verifies_against_the_published_digest(tmp_path: Path) -> None:
    (tmp_path / "uci-example").mkdir()
    (tmp_path / "uci-example" / "one.data.gz").write_bytes(gzip.compress(CONTENT))
    assert read_verified(_source(), tmp_path) == {"one.data": CONTENT}


def test_an_edited_file_is_refused_naming_it_and_both_digests(tmp_path: Path) -> None:
    (tmp_path / "uci-example").mkdir()
    edited = CONTENT.replace(b"63.0", b"64.0")
    (tmp_path / "uci-example" / "one.data").write_bytes(edited)
    with pytest.raises(DataFileError) as caught:
        read_verified(_source(), tmp_path)
    message = str(caught.value)
    assert "one.data" in message
    assert MD5 in message
    assert hashlib.md5(edited).hexdigest() in message


def test_a_truncated_gzip_file_is_refused_naming_it(tmp_path: Path) -> None:
    (tmp_path / "uci-example").mkdir()
    packed = gzip.compress(CONTENT)
    (tmp_path / "uci-example" / "one.data.gz").write_bytes(packed[: len(packed) // 2])
    with pytest.raises(DataFileError, match=r"one\.data\.gz.*" + MD5):
        read_verified(_source(), tmp_path)


def test_a_missing_file_says_where_to_get_it_and_where_to_put_it(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as caught:
        read_verified(_source(), tmp_path)
    message = str(caught.value)
    assert "https://archive.ics.uci.edu/example/one.data" in message
    assert str(tmp_path / "uci-example") in message
    assert "download=true" in message


def test_download_fetches_verifies_and_keeps_the_file(tmp_path: Path) -> None:
    published = tmp_path / "publisher" / "one.data"
    published.parent.mkdir()
    published.write_bytes(CONTENT)
    root = tmp_path / "root"
    source = _source(url=published.as_uri())  # a file: URL, so no network
    assert read_verified(source, root, download=True) == {"one.data": CONTENT}
    assert (root / "uci-example" / "one.data").read_bytes() == CONTENT
    assert [p.name for p in (root / "uci-example").iterdir()] == ["one.data"]


def test_a_download_with_the_wrong_digest_leaves_nothing_behind(tmp_path: Path) -> None:
    published = tmp_path / "publisher" / "one.data"
    published.parent.mkdir()
    published.write_bytes(CONTENT + b"extra\n")
    root = tmp_path / "root"
    with pytest.raises(DataFileError, match=r"one\.data"):
        read_verified(_source(url=published.as_uri()), root, download=True)
    assert list((root / "uci-example").iterdir()) == []

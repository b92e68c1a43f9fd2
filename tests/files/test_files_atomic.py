"""fairfl._files.write_atomically: the new file whole, or the old one untouched."""

from __future__ import annotations

from pathlib import Path

import pytest

from fairfl._files import write_atomically


def test_the_file_is_written_in_a_new_folder(tmp_path: Path):
    path = tmp_path / "run-1" / "client-0.json"
    write_atomically(path, lambda stream: stream.write(b"{}"))
    assert path.read_bytes() == b"{}"
    assert [p.name for p in path.parent.iterdir()] == ["client-0.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path):
    path = tmp_path / "client-0.json"
    path.write_bytes(b"old")

    def half_then_fail(stream) -> None:
        stream.write(b"ne")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomically(path, half_then_fail)
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["client-0.json"]

"""The docs build's internal-link check (docs/site/_ext/check_links.py) on a small site.

The build runs it over every page it writes (a broken link is a warning, so an error
under ``-W``); here it must find each kind of broken link and pass every good one.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "site" / "_ext"))

from check_links import broken_links  # noqa: E402


def write(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"<html><body>{body}</body></html>", encoding="utf-8")


def test_every_broken_internal_link_is_found_and_no_good_one(tmp_path):
    site = tmp_path / "site"
    write(
        site / "index.html",
        '<a href="guide/page.html#usage">ok</a> <a href="guide/">folder</a> '
        '<a href="#top" id="top">self</a> <a href="#">top</a> '
        '<img src="_static/logo%20small.png"/> <script src="_static/app.js?v=3"></script> '
        '<a href="https://example.org/x.html">web</a> <a href="mailto:a@b.c">mail</a> '
        '<a href="//cdn.example.org/x.js">cdn</a> '
        '<a href="guide/page.html#Usage">wrong case</a> <a href="missing.html">gone</a> '
        '<a href="../outside.html">outside</a> <a href="#nowhere">no anchor</a>',
    )
    write(
        site / "guide" / "page.html", '<h2 id="usage">Usage</h2><a href="../index.html#top">up</a>'
    )
    write(site / "guide" / "index.html", '<a href="page.html?x=1&amp;y=2#usage">query</a>')
    (site / "_static").mkdir()
    (site / "_static" / "logo small.png").write_bytes(b"png")
    (site / "_static" / "app.js").write_text("// js")
    (tmp_path / "outside.html").write_text("<html></html>")

    assert broken_links(site) == [
        "index.html: guide/page.html#Usage (no id 'Usage' in that page)",
        "index.html: missing.html (no such file)",
        "index.html: ../outside.html (outside the site)",
        "index.html: #nowhere (no id 'nowhere' in that page)",
    ]


def test_a_site_without_broken_links_passes(tmp_path):
    write(tmp_path / "index.html", '<a href="a.html#x">a</a>')
    write(tmp_path / "a.html", '<p id="x">x</p><a href="index.html">back</a>')
    assert broken_links(tmp_path) == []

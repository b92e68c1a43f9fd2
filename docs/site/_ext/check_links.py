"""The built site's internal links: every one leads to a file of the site, and its anchor.

Sphinx's ``-n`` checks cross-references while it reads the pages; this checks what the
HTML it wrote links to, whatever made the link (MyST's Markdown links, the theme,
autosummary's tables, the generated results pages): every relative ``href`` or ``src``
must name a file inside the site, and a ``#fragment`` an ``id`` in that page. Links
with a scheme (``https:``, ``mailto:``, ``data:``) and protocol-relative ones leave the
site and are not followed: there is no network where the docs build.
"""

from __future__ import annotations

import html
import re
from functools import cache
from pathlib import Path
from urllib.parse import unquote, urlsplit

#: An ``href``/``src`` (a link) or ``id`` (an anchor) attribute, double-quoted as Sphinx
#: writes them.
ATTRIBUTE = re.compile(r"""\s(href|src|id)="([^"]*)\"""")
#: A link that leaves the site: a scheme (``https:``, ``mailto:``) or ``//host``.
EXTERNAL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*:|//)")


@cache
def _page(path: Path) -> tuple[tuple[str, ...], frozenset[str]]:
    """The links and the anchors (``id``s) of an HTML file."""
    links, anchors = [], set()
    for attribute, value in ATTRIBUTE.findall(path.read_text(encoding="utf-8")):
        if attribute == "id":
            anchors.add(html.unescape(value))
        else:
            links.append(html.unescape(value))
    return tuple(links), frozenset(anchors)


def broken_links(site: Path) -> list[str]:
    """Every internal link of the HTML files under ``site`` that leads nowhere.

    Returns
    -------
    list[str]
        ``"<page>: <link> (<why>)"`` for each, pages relative to ``site``, in order.
    """
    site = site.resolve()
    _page.cache_clear()
    broken = []
    for page in sorted(site.rglob("*.html")):
        for link in _page(page)[0]:
            if not link or link == "#" or EXTERNAL.match(link):
                continue  # the page's top, or outside the site
            parts = urlsplit(link)
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if target.is_dir():
                target = target / "index.html"
            where = f"{page.relative_to(site).as_posix()}: {link}"
            if not target.is_relative_to(site):
                broken.append(f"{where} (outside the site)")
            elif not target.is_file():
                broken.append(f"{where} (no such file)")
            elif (
                parts.fragment
                and target.suffix == ".html"
                and unquote(parts.fragment) not in _page(target)[1]
            ):
                broken.append(f"{where} (no id {unquote(parts.fragment)!r} in that page)")
    return broken

"""The built docs site in a real browser (headless Debian Chromium through Selenium).

Serves ``build/docs`` on loopback (a thread it stops), uses the site's search to find a
rule and a run-config key, follows the rule page's link into the API reference, and
checks that MathJax typeset the rule's equations, and saves a screenshot of the rule page
(into the test's temporary folder; as ``docs/figures/docs-site.png`` with
``FAIRFL_REFRESH_FIGURES=1``, so that the suite leaves the checkout clean).
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
FIGURE = ROOT / "docs" / "figures" / "docs-site.png"

# Sphinx's search adds its hits one by one, then says "Search finished, found N pages";
# return the hits' links once it has.
RESULT_LINKS_JS = """
const summary = document.querySelector('#search-results .search-summary');
if (!summary || !summary.textContent.includes('Search finished')) return null;
return Array.from(document.querySelectorAll('#search-results ul.search li a'),
                  a => a.getAttribute('href'));
"""


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def site_url(built_site: Path) -> Iterator[str]:
    handler = functools.partial(QuietHandler, directory=str(built_site))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture
def driver():
    from fairfl.dashboard.browser import chromium, find_chromium

    if find_chromium() is None:
        pytest.fail(
            "chromium and chromedriver are needed: apt-get install chromium chromium-driver"
        )
    browser = chromium(width=1280, height=900)
    try:
        yield browser
    finally:
        browser.quit()


def search(driver, site_url: str, words: str) -> list[str]:
    """Type ``words`` into the sidebar's search box, submit, and return the hits' links."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    from fairfl.dashboard.browser import wait_until

    driver.get(f"{site_url}/index.html")
    box = driver.find_element(By.CSS_SELECTOR, "form.sidebar-search-container input[name=q]")
    box.send_keys(words, Keys.ENTER)
    wait_until(driver, f"return location.href.includes('q={quote(words.split()[0])}')", 30)
    return wait_until(driver, RESULT_LINKS_JS, 60)


def test_search_finds_a_rule_and_a_key_and_the_rule_links_to_the_api(driver, site_url, tmp_path):
    from selenium.webdriver.common.by import By

    from fairfl.dashboard.browser import wait_until

    # A rule by its name, and a run-config key (searched as its words).
    hits = search(driver, site_url, "semivred")
    assert any("_generated/rules/semivred.html" in href for href in hits), hits
    hits = search(driver, site_url, "rcfl eta probe")
    assert any("_generated/rules/rcfl.html" in href for href in hits), hits

    # Open the q-FFL page from the search and follow its class link to the API reference.
    hits = search(driver, site_url, "qffl")
    page = next(href for href in hits if "_generated/rules/qffl.html" in href)
    driver.get(f"{site_url}/{page.split('?')[0].lstrip('/')}")
    wait_until(driver, "return document.readyState === 'complete'", 30)
    assert "qffl-q" in driver.find_element(By.TAG_NAME, "article").text
    # The equations are typeset (MathJax's CommonHTML output), not shown as LaTeX.
    wait_until(
        driver, "return document.querySelectorAll('.mjx-chtml.MJXc-display').length >= 3", 60
    )
    screenshot = (
        FIGURE if os.environ.get("FAIRFL_REFRESH_FIGURES") == "1" else tmp_path / FIGURE.name
    )
    driver.save_screenshot(str(screenshot))
    assert screenshot.stat().st_size > 10_000

    # The page's "Class" line links to the class in the API reference.
    link = driver.find_element(
        By.CSS_SELECTOR, "article a.reference.internal[href*='api/fairfl.strategies.qffl.html']"
    )
    link.click()
    wait_until(driver, "return location.pathname.includes('/_generated/api/')", 30)
    assert driver.execute_script(
        "return !!document.getElementById('fairfl.strategies.qffl.QFFL')"
    ), driver.current_url

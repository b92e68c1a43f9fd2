r"""Drive the dashboard in headless Chromium (Selenium): tests, the benchmark, screenshots.

Uses the system's Chromium and chromedriver (Debian's ``chromium`` and
``chromium-driver``; ``scripts/test.sh`` installs them as root) and never downloads a
browser or driver (``SE_OFFLINE``). Selenium is in the ``dev`` extra.

Screenshots of a dashboard (what the ``docs/figures/dashboard*.png`` files were made
with)::

    python -m fairfl.dashboard.browser docs/results/digits-table6 --run "rcfl seed 0" \\
        --out docs/figures/dashboard.png
    python -m fairfl.dashboard.browser docs/results/digits-table6 --run "rcfl seed 0" \\
        --view rule --out docs/figures/dashboard-rule.png

The comparison's screenshots (``docs/figures/dashboard-ranked.png``,
``dashboard-baseline.png``, ``dashboard-url.png``) come from its browser test::

    FAIRFL_REFRESH_FIGURES=1 python -m pytest tests/dashboard/test_dashboard_comparison_browser.py
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

#: Where Debian installs them.
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"

#: True once every graph in the page (those of the open view: the others are not in the
#: page until their tab is opened) has drawn a figure from the server (Plotly figures
#: carry their template; the empty figure a graph starts with has none) and no callback
#: is pending.
RENDERED_JS = """
const count = document.getElementById('round-count');
if (!count || !count.textContent) return false;
if (document.querySelector('[data-dash-is-loading="true"]')) return false;
const graphs = document.querySelectorAll('.dash-graph');
if (!graphs.length) return false;
for (const graph of graphs) {
  const gd = graph.querySelector('.js-plotly-plot');
  if (!gd || !gd._fullLayout || !gd.data || !gd.layout || !gd.layout.template) return false;
}
return true;
"""

#: Like :data:`RENDERED_JS`, for a view that may have no graph (config and hardware).
VIEW_DRAWN_JS = RENDERED_JS.replace("if (!graphs.length) return false;\n", "")


def rows_js(graph_id: str) -> str:
    """A script returning the rows of the heat map drawn in graph ``graph_id``, or -1."""
    return f"""
const gd = document.querySelector('#{graph_id} .js-plotly-plot');
if (!gd || !gd._fullData || !gd._fullData.length || gd._fullData[0].type !== 'heatmap') return -1;
return gd._fullData[0].y.length;
"""


#: Rows of the per-client heat map drawn in the page (its y labels), or -1.
HEATMAP_ROWS_JS = rows_js("client-heatmap")


def find_chromium() -> tuple[str, str] | None:
    """Paths of Chromium and chromedriver, or None if either is missing."""
    browser = shutil.which("chromium") or (CHROMIUM if os.path.exists(CHROMIUM) else None)
    driver = shutil.which("chromedriver") or (
        CHROMEDRIVER if os.path.exists(CHROMEDRIVER) else None
    )
    return (browser, driver) if browser and driver else None


def chromium(width: int = 1400, height: int = 1000) -> Any:
    """A headless Chromium WebDriver (the caller must ``quit()`` it).

    Raises
    ------
    FileNotFoundError
        If Chromium or chromedriver is not installed.
    """
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    found = find_chromium()
    if found is None:
        raise FileNotFoundError(
            "chromium and chromedriver are needed: apt-get install chromium chromium-driver"
        )
    os.environ.setdefault("SE_OFFLINE", "true")  # never let Selenium Manager download
    options = webdriver.ChromeOptions()
    options.binary_location = found[0]
    for argument in (
        "--headless=new",
        "--no-sandbox",  # root in a container has no user namespace sandbox
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-extensions",
        f"--window-size={width},{height}",
    ):
        options.add_argument(argument)
    return webdriver.Chrome(service=Service(found[1]), options=options)


def wait_until(driver: Any, script: str, timeout: float, poll: float = 0.05) -> Any:
    """Run ``script`` until it returns something truthy; return it.

    Raises
    ------
    TimeoutError
        If it does not within ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = driver.execute_script(script)
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"the page did not reach the state within {timeout} s")
        time.sleep(poll)


def open_view(driver: Any, view: str, timeout: float = 60) -> None:
    """Click the tab of ``view`` (``rule``, ``participation``, ...); wait until it is drawn.

    Raises
    ------
    TimeoutError
        If its graphs are not drawn within ``timeout`` seconds.
    """
    selected = f"return !!document.querySelector('#tab-{view}.tab--selected')"
    deadline = time.monotonic() + timeout
    # The tabs sit below the comparison: a click that lands while the page still lays
    # out its graphs after scrolling there can miss, so it is tried again.
    while not driver.execute_script(selected):
        driver.execute_script(
            f"document.getElementById('tab-{view}').scrollIntoView({{block: 'center'}})"
        )
        driver.find_element("id", f"tab-{view}").click()
        try:
            wait_until(driver, selected, timeout=min(5.0, max(0.1, deadline - time.monotonic())))
        except TimeoutError:
            if time.monotonic() > deadline:
                raise
    wait_until(driver, VIEW_DRAWN_JS, max(0.1, deadline - time.monotonic()))


#: True once the per-client comparison has drawn its scatter of clients.
COMPARED_JS = """
const gd = document.querySelector('#comparison .js-plotly-plot');
return !!gd && !!gd._fullData && gd._fullData.length === 2
  && !!document.getElementById('comparison-summary');
"""


def choose(driver: Any, dropdown_id: str, value: str, timeout: float = 60) -> None:
    """Pick ``value`` in the Dash dropdown ``dropdown_id``: open it, type, click the option.

    Raises
    ------
    TimeoutError
        If the option does not show within ``timeout`` seconds.
    """
    driver.find_element("css selector", f"#{dropdown_id}").click()
    driver.switch_to.active_element.send_keys(value)
    pick = (
        "const option = Array.from(document.querySelectorAll('.dash-dropdown-content label input'))"
        f".find(i => i.value === {json.dumps(value)});"
        "if (!option) return false; option.closest('label').click(); return true;"
    )
    wait_until(driver, pick, timeout)


def screenshot(
    folders: list[Path],
    out: Path,
    *,
    run: str | None,
    width: int,
    height: int,
    view: str = "fairness",
    compare_with: str | None = None,
    full_page: bool = True,
) -> Path:
    """Serve ``folders`` on a free loopback port, open the page's ``view``, save a PNG.

    With ``compare_with``, that rule (a variant of the comparison) is chosen as B in the
    per-client comparison. The whole page is shot (the window grows to its height), or only
    the first ``width`` x ``height`` screen when not ``full_page``. The PNG is reduced to
    a 256-colour palette (Pillow), as the report's plots are.
    """
    from PIL import Image

    from fairfl.dashboard.app import DashboardServer, create_app

    driver = chromium(width, height)
    try:
        with DashboardServer(create_app(folders, interval_s=1.0), port=0) as server:
            driver.get(server.url + (f"?{urlencode({'run': run})}" if run else ""))
            wait_until(driver, RENDERED_JS, timeout=60)
            if view != "fairness":
                open_view(driver, view)
            if compare_with is not None:
                choose(driver, "compare-with", compare_with)
                wait_until(driver, COMPARED_JS, timeout=60)
            for _ in range(
                3 if full_page else 0
            ):  # grow the window until the page fits (graphs may reflow)
                full, inner, outer = driver.execute_script(
                    "return [document.body.scrollHeight, innerHeight, outerHeight]"
                )
                if inner >= full:
                    break
                driver.set_window_size(width, int(outer + full - inner + 20))
                time.sleep(1.0)  # Plotly redraws for the new size
            driver.execute_script("window.scrollTo(0, 0)")
            out.parent.mkdir(parents=True, exist_ok=True)
            driver.save_screenshot(str(out))
    finally:
        driver.quit()
    with Image.open(out) as image:
        palette = image.convert("RGB").quantize(256, method=Image.Quantize.MEDIANCUT)
    palette.save(out, optimize=True)
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m fairfl.dashboard.browser DIR ... --out PNG``: a dashboard screenshot."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--run", help="run to show (its name in the run dropdown)")
    parser.add_argument(
        "--view",
        default="fairness",
        choices=["fairness", "rule", "participation", "facts"],
        help="the tab to shoot (default: the first, fairness and clients)",
    )
    parser.add_argument("--compare-with", help="a second run for the per-client comparison")
    parser.add_argument(
        "--first-screen",
        action="store_true",
        help="shoot only the first WIDTH x HEIGHT screen (what a user sees without scrolling)",
    )
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("--height", type=int, default=1000)
    args = parser.parse_args(argv)
    path = screenshot(
        args.folders,
        args.out,
        run=args.run,
        width=args.width,
        height=args.height,
        view=args.view,
        compare_with=args.compare_with,
        full_page=not args.first_screen,
    )
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())

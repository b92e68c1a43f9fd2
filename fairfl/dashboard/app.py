"""The dashboard's web page (Dash), its access check, and a server that can be stopped.

:func:`create_app` builds a Dash app over a :class:`~fairfl.dashboard.follow.Registry`.
The page has four views (``dcc.Tabs``): fairness and clients (opened first), rule state,
participation, config and hardware. A ``dcc.Interval`` asks the server every
``interval_s`` seconds whether anything changed (the server then reads only the new
bytes of each ``rounds.jsonl``); when something did, the comparison of every run and
the open view's figures of :mod:`fairfl.dashboard.figures` are rebuilt and redrawn, and
another view's are built when it is opened. A page load therefore builds, sends and
draws the comparison and the first view only.

plotly.js comes from ``assets/plotly-cartesian.min.js``: plotly.js's own cartesian
bundle (``plotly.js-cartesian-dist-min`` on npm, MIT licence beside it), which has every
trace the page draws (scatter, bar, histogram, heatmap) in 1.5 MB where the full
``plotly.min.js`` that Plotly ships is 4.8 MB; the browser spends most of a cold page
load evaluating plotly.js. It is used only while its version is the one the installed
Plotly was made for (:func:`cartesian_bundle_matches`); otherwise the page falls back to
Plotly's full bundle, with a warning. To refresh it for a new Plotly::

    v=$(python -c "import plotly.offline as o; print(o.get_plotlyjs_version())")
    npm pack "plotly.js-cartesian-dist-min@$v"

and copy ``package/plotly-cartesian.min.js`` from the archive into ``assets/``.

The page's layout lives in :mod:`fairfl.dashboard.layout`, its callbacks in
:mod:`fairfl.dashboard.callbacks`; this module builds the app, guards it and serves it.

Access (:func:`install_guard`): bound to loopback (the default, 127.0.0.1) the page
needs no token, but requests whose ``Host`` header is not a loopback name are refused
(403), so a web page elsewhere cannot reach it by DNS rebinding. Bound to any other
address, every request must carry the token: ``?token=...`` once (answered with a
redirect that sets an HttpOnly, SameSite=Strict cookie, and drops the token from the
address), the cookie afterwards, or an ``Authorization: Bearer ...`` header; anything
else gets 401. The page is plain HTTP: use an SSH tunnel (``deploy/README.md``) or a
TLS proxy in front of it, as the token travels in clear otherwise.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import threading
from collections.abc import Sequence
from pathlib import Path

from dash import Dash
from flask import Flask, Response, redirect, request
from plotly.offline import get_plotlyjs_version
from werkzeug.serving import WSGIRequestHandler, make_server
from werkzeug.wrappers import Response as WerkzeugResponse

from fairfl.dashboard.callbacks import _register_callbacks
from fairfl.dashboard.follow import Registry
from fairfl.dashboard.layout import _head, _layout
from fairfl.dashboard.plotting import warm_up
from fairfl.telemetry.config import is_loopback

#: Name of the cookie that carries proof of the token after ``?token=``.
COOKIE = "fairfl_dashboard"
#: Host names a loopback-bound dashboard answers to.
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1", "[::1]")
#: Default port (Dash's).
DEFAULT_PORT = 8050

#: Files Dash serves under ``/assets/`` (its ``.js`` files load with the page).
ASSETS = Path(__file__).with_name("assets")
#: plotly.js's cartesian bundle (see the module docstring).
CARTESIAN_BUNDLE = ASSETS / "plotly-cartesian.min.js"

logger = logging.getLogger(__name__)


def check_binding(host: str, *, allow_remote: bool, token: str | None) -> None:
    """Refuse a non-loopback ``host`` without ``allow_remote`` and a token.

    Raises
    ------
    ValueError
        Naming the option that is missing.
    """
    if is_loopback(host):
        return
    if not allow_remote:
        raise ValueError(
            f"--host {host} is not a loopback address: pass --allow-remote (with a token) "
            "to serve other machines, or use an SSH tunnel (deploy/README.md)"
        )
    if not token:
        raise ValueError(f"--host {host} with --allow-remote needs a token, got none")


def bundle_version(path: Path) -> str | None:
    """The plotly.js version a bundle names in its licence header (``v4.1.1``), or None."""
    try:
        with path.open("rb") as handle:
            head = handle.read(300).decode("ascii", "replace")
    except OSError:
        return None
    match = re.search(r"\* plotly\.js \([^)]*\) v(\d+\.\d+\.\d+)", head)
    return match.group(1) if match else None


def cartesian_bundle_matches(path: Path = CARTESIAN_BUNDLE) -> bool:
    """Whether ``path`` is the plotly.js version the installed Plotly's figures are for."""
    installed: str = get_plotlyjs_version()  # plotly ships no type information
    return bundle_version(path) == installed


def _proof(token: str) -> str:
    return hmac.new(token.encode(), b"fairfl-dashboard-cookie", hashlib.sha256).hexdigest()


def install_guard(server: Flask, *, token: str | None, loopback: bool) -> None:
    """Check every request before Dash sees it (see the module docstring)."""
    proof = _proof(token) if token else None

    @server.before_request
    def _guard() -> WerkzeugResponse | None:
        if loopback and request.host.rsplit(":", 1)[0] not in LOOPBACK_NAMES:
            return Response("fairfl dashboard: unknown Host header\n", status=403)
        if token is None or proof is None:
            return None
        given = request.args.get("token")
        if given is not None:
            if not hmac.compare_digest(given.encode(), token.encode()):
                return Response("fairfl dashboard: wrong token\n", status=401)
            rest = [f"{k}={v}" for k, v in request.args.items(multi=True) if k != "token"]
            response = redirect(request.path + ("?" + "&".join(rest) if rest else ""))
            response.set_cookie(COOKIE, proof, httponly=True, samesite="Strict")
            return response
        header = request.headers.get("Authorization", "")
        if header.startswith("Bearer ") and hmac.compare_digest(
            header.removeprefix("Bearer ").encode(), token.encode()
        ):
            return None
        cookie = request.cookies.get(COOKIE, "")
        if cookie and hmac.compare_digest(cookie.encode(), proof.encode()):
            return None
        return Response(
            "fairfl dashboard: token required (open the URL with ?token=..., or send "
            "'Authorization: Bearer <token>')\n",
            status=401,
        )


def create_app(
    folders: Sequence[Path],
    *,
    interval_s: float = 2.0,
    token: str | None = None,
    loopback: bool = True,
) -> Dash:
    """The dashboard over ``folders`` (out-dirs or ``fairfl compare`` folders).

    Parameters
    ----------
    folders : Sequence[Path]
        Folders to follow; each may not exist yet.
    interval_s : float (default: 2.0)
        Seconds between two checks for new rounds (the page's ``dcc.Interval``).
    token : str | None
        Required on every request when given (see :func:`install_guard`).
    loopback : bool (default: True)
        Whether the server is bound to loopback (then only loopback Host headers pass).

    Raises
    ------
    ValueError
        If ``interval_s`` is not positive or no folder is given.
    """
    if not interval_s > 0:
        raise ValueError(f"interval_s must be > 0, got {interval_s}")
    registry = Registry([Path(f) for f in folders], min_interval=min(0.5, interval_s / 2))
    cartesian = cartesian_bundle_matches()
    if not cartesian:
        logger.warning(
            "dashboard: %s is plotly.js %s, the installed Plotly wants %s: serving Plotly's "
            "full plotly.min.js instead (slower page loads)",
            CARTESIAN_BUNDLE.name,
            bundle_version(CARTESIAN_BUNDLE),
            get_plotlyjs_version(),
        )
    app = Dash(
        __name__,
        title="fairfl dashboard",
        update_title=None,  # type: ignore[arg-type]  # None turns it off (Dash docs)
        serve_locally=True,
        assets_folder=str(ASSETS),
        assets_ignore="" if cartesian else re.escape(CARTESIAN_BUNDLE.name),
        include_assets_files=True,
    )
    install_guard(app.server, token=token, loopback=loopback)
    # Dash checks callbacks against this one, so setting the layout reads nothing yet
    app.validation_layout = _layout(interval_s, (None, [], [], [], None))  # type: ignore[assignment]
    app.layout = lambda: _layout(interval_s, _head(registry, None))  # per page load
    _register_callbacks(app, registry)
    warm_up()
    app.registry = registry  # type: ignore[attr-defined]  # for tests and the benchmark
    return app


class _QuietHandler(WSGIRequestHandler):
    """Werkzeug's request handler without a log line per request (the page polls)."""

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """Log nothing."""


class DashboardServer:
    """A dashboard served by Werkzeug in a background thread, stopped by :meth:`stop`.

    Parameters
    ----------
    app : Dash
        From :func:`create_app`.
    host : str
        Address to bind (see :func:`check_binding`).
    port : int
        Port; 0 picks a free one (read :attr:`port`).

    Raises
    ------
    OSError
        If it cannot listen there (a port in use, an address not of this host).
    """

    def __init__(self, app: Dash, host: str = "127.0.0.1", port: int = DEFAULT_PORT):
        self.app = app
        self.host = host
        try:
            self._server = make_server(
                host, port, app.server, threaded=True, request_handler=_QuietHandler
            )
        except SystemExit as error:  # Werkzeug exits when it cannot bind
            raise OSError(f"cannot listen on {host}:{port} (port in use?)") from error
        self.port = int(self._server.server_port)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The page's address (IPv6 hosts in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    def start(self) -> DashboardServer:
        """Serve in a daemon thread; returns self."""
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="fairfl-dashboard", daemon=True
        )
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve in this thread until :meth:`stop` is called from another."""
        self._server.serve_forever()

    def stop(self) -> None:
        """Stop the thread's serving (if started), close the socket, join the thread."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=10)
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> DashboardServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

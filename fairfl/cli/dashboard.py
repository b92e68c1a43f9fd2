"""``fairfl dashboard``, and the live dashboard of ``fairfl run`` and ``fairfl compare``.

Its parser, the token check and the server of ``fairfl dashboard DIR``; the
``--dashboard`` page the run and compare commands start, and the wait that keeps a
finished comparison's page serving until Ctrl-C.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shlex
import signal
import sys
import time
from pathlib import Path
from typing import Any

from fairfl.cli.common import DASHBOARD_PORT

#: Environment variable holding the dashboard's token.
TOKEN_ENV = "FAIRFL_DASHBOARD_TOKEN"
#: Shortest token accepted (a generated one has 32 characters).
MIN_TOKEN_LENGTH = 16


def add_parser(commands: Any) -> None:
    """``fairfl dashboard DIR [DIR ...]``: serve a live page of runs' fairness."""
    board = commands.add_parser(
        "dashboard",
        help="serve a live web page of runs' fairness (follows rounds.jsonl as it grows)",
        description=(
            "Follow each folder's rounds.jsonl (a run's out-dir, or a fairfl compare "
            "folder; it may not exist yet) and serve a page that updates every few seconds."
        ),
        epilog=(
            "Bound to loopback (the default) the page needs no token; from another machine "
            "use an SSH tunnel (deploy/README.md). Any other --host needs --allow-remote "
            "and a token: FAIRFL_DASHBOARD_TOKEN or --token-file (else one is generated "
            "and printed); open the printed URL with ?token=... once (a cookie keeps it) "
            "or send 'Authorization: Bearer <token>'."
        ),
    )
    board.add_argument("folders", nargs="+", type=Path, metavar="DIR")
    board.add_argument("--host", default="127.0.0.1", help="address to bind (127.0.0.1)")
    board.add_argument("--port", type=int, default=DASHBOARD_PORT, help="port (8050; 0: any)")
    board.add_argument(
        "--interval", type=float, default=2.0, help="seconds between checks for new rounds (2)"
    )
    board.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow a --host other than loopback (a token is then required)",
    )
    board.add_argument("--token-file", type=Path, help="file whose first line is the token")


def _load_dashboard() -> Any:
    """``fairfl.dashboard``, or a usage error naming the extra to install."""
    try:
        import fairfl.dashboard as dashboard
    except ImportError as error:
        raise ValueError(
            f"the dashboard needs Dash and Plotly ({error}): pip install 'fairfl[dashboard]'"
        ) from error
    return dashboard


def _dashboard_token(args: argparse.Namespace) -> str | None:
    """The token from ``--token-file`` or ``FAIRFL_DASHBOARD_TOKEN`` (None if neither)."""
    if args.token_file is not None:
        lines = args.token_file.read_text(encoding="utf-8").splitlines()
        token = lines[0].strip() if lines else ""
        source = f"--token-file {args.token_file}"
    else:
        token = os.environ.get(TOKEN_ENV, "").strip()
        source = TOKEN_ENV
        if not token:
            return None
    if len(token) < MIN_TOKEN_LENGTH:
        raise ValueError(
            f"{source}: the token must have at least {MIN_TOKEN_LENGTH} characters, "
            f"got {len(token)}"
        )
    return token


def _run_dashboard(args: argparse.Namespace) -> int:
    dashboard = _load_dashboard()
    token = _dashboard_token(args)
    if token is None and args.allow_remote and not dashboard.is_loopback(args.host):
        token = secrets.token_urlsafe(24)
    dashboard.check_binding(args.host, allow_remote=args.allow_remote, token=token)
    app = dashboard.create_app(
        args.folders,
        interval_s=args.interval,
        token=token,
        loopback=dashboard.is_loopback(args.host),
    )
    try:
        server = dashboard.DashboardServer(app, args.host, args.port)
    except OSError as error:
        raise ValueError(f"--host {args.host} --port {args.port}: {error}") from error
    app.registry.refresh(time.monotonic())  # read what exists now, before the first page
    url = server.url + (f"?token={token}" if token else "")
    for folder in args.folders:
        if not folder.exists():  # allowed (a run about to start), but say so
            print(
                f"fairfl dashboard: {folder} does not exist (yet): the page shows its "
                "runs once one writes there",
                file=sys.stderr,
            )
    print(f"fairfl dashboard: {url} (Ctrl-C to stop)", flush=True)
    server.serve_forever()
    return 0


def _live_dashboard(program: str, folder: Path, port: int | None) -> Any:
    """``--dashboard``: the started server; else print the command, None."""
    if port is None:
        command = shlex.join(["fairfl", "dashboard", str(folder)])
        print(f"{program}: watch it live with: {command}", file=sys.stderr, flush=True)
        return None
    dashboard = _load_dashboard()
    try:
        server = dashboard.DashboardServer(dashboard.create_app([folder]), port=port)
    except OSError as error:
        raise ValueError(f"--dashboard {port}: {error}") from error
    print(f"{program}: live dashboard at {server.url}", file=sys.stderr, flush=True)
    return server.start()


def wait_for_interrupt() -> None:
    """Block until Ctrl-C (SIGINT) or SIGTERM; both end the wait as KeyboardInterrupt.

    Every run has ended by now, so the handlers that stop a comparison's processes give
    way to these for the wait, and come back after it.
    """

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = {n: signal.signal(n, interrupt) for n in (signal.SIGINT, signal.SIGTERM)}
    try:
        while True:
            time.sleep(3600)
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _keep_serving(program: str, server: Any) -> None:
    """After a comparison: serve its finished results until the user stops the page.

    The page of ``--dashboard`` would otherwise vanish the moment the last run ends,
    just when its results are complete; the terminal says so and how to stop it.
    """
    print(
        f"{program}: finished; the dashboard keeps serving the results at {server.url} "
        "until you stop it (Ctrl-C)",
        file=sys.stderr,
        flush=True,
    )
    try:
        wait_for_interrupt()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    print(f"{program}: dashboard stopped", file=sys.stderr, flush=True)

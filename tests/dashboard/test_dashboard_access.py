"""Who may open the dashboard: loopback by default, a token for anything else."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request

import pytest

from fairfl import cli
from fairfl.dashboard import DashboardServer, check_binding, create_app, is_loopback

TOKEN = "s3cret-token-of-32-characters-xx"


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("localhost", True),
        ("::1", True),
        ("0.0.0.0", False),
        ("10.1.2.3", False),
        ("fl.example.org", False),
    ],
)
def test_is_loopback(host, loopback):
    assert is_loopback(host) is loopback


def test_binding_elsewhere_needs_the_flag_and_a_token():
    check_binding("127.0.0.1", allow_remote=False, token=None)
    with pytest.raises(
        ValueError, match=r"--host 0\.0\.0\.0 is not a loopback address: pass --allow"
    ):
        check_binding("0.0.0.0", allow_remote=False, token=TOKEN)
    with pytest.raises(ValueError, match="--allow-remote needs a token, got none"):
        check_binding("0.0.0.0", allow_remote=True, token="")
    check_binding("0.0.0.0", allow_remote=True, token=TOKEN)


def test_token_as_query_then_cookie_or_header(tmp_path):
    client = create_app([tmp_path], token=TOKEN, loopback=False).server.test_client()
    assert client.get("/").status_code == 401
    assert client.get("/_dash-layout").status_code == 401
    assert client.get("/?token=wrong").status_code == 401
    answer = client.get(f"/?token={TOKEN}&run=afl")
    assert answer.status_code == 302 and answer.headers["Location"] == "/?run=afl"
    cookie = answer.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and TOKEN not in cookie
    assert client.get("/").status_code == 200  # the cookie now proves the token
    fresh = create_app([tmp_path], token=TOKEN, loopback=False).server.test_client()
    assert fresh.get("/", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    assert fresh.get("/", headers={"Authorization": "Bearer nope"}).status_code == 401


def test_loopback_answers_loopback_host_names_only(tmp_path):
    client = create_app([tmp_path]).server.test_client()
    assert client.get("/", headers={"Host": "127.0.0.1:8050"}).status_code == 200
    assert client.get("/", headers={"Host": "localhost:8050"}).status_code == 200
    # a DNS-rebinding page reaches 127.0.0.1 under its own name
    assert client.get("/", headers={"Host": "evil.example:8050"}).status_code == 403


def test_server_starts_and_stops(tmp_path):
    with (
        DashboardServer(create_app([tmp_path]), port=0) as server,
        urllib.request.urlopen(server.url, timeout=10) as page,
    ):
        assert page.status == 200 and b"fairfl dashboard" in page.read()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(server.url, timeout=2)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--host", "0.0.0.0"], "--host 0.0.0.0 is not a loopback address"),
        (["--interval", "0"], "interval_s must be > 0, got 0.0"),
    ],
)
def test_cli_refuses_unsafe_or_bad_settings(tmp_path, capsys, argv, message):
    assert cli.main(["dashboard", str(tmp_path), *argv]) == 2
    assert message in capsys.readouterr().err


def test_cli_refuses_a_short_token(tmp_path, capsys):
    token_file = tmp_path / "token"
    token_file.write_text("short\n")
    argv = ["dashboard", str(tmp_path), "--allow-remote", "--host", "0.0.0.0"]
    assert cli.main([*argv, "--token-file", str(token_file)]) == 2
    assert "the token must have at least 16 characters, got 5" in capsys.readouterr().err


def test_cli_serves_until_stopped(tmp_path, monkeypatch, capsys):
    served = []
    monkeypatch.setattr(DashboardServer, "serve_forever", lambda self: served.append(self))
    monkeypatch.setenv(cli.TOKEN_ENV, TOKEN)
    argv = ["dashboard", str(tmp_path / "later"), "--host", "0.0.0.0", "--allow-remote"]
    assert cli.main([*argv, "--port", "0"]) == 0
    (server,) = served
    server.stop()
    assert f"?token={TOKEN} (Ctrl-C to stop)" in capsys.readouterr().out


def test_cli_reports_a_taken_port(tmp_path, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert cli.main(["dashboard", str(tmp_path), "--port", str(port)]) == 2
    assert f"--host 127.0.0.1 --port {port}: " in capsys.readouterr().err

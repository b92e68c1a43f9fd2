"""The Fleet proxy refuses non-canonical request paths before routing (issue 35, item 4).

nginx routes on the normalised path (dot segments resolved, escapes decoded, slashes
merged) but ``proxy_pass`` forwards the raw one: ``/v1/control/x/../../fleet/...``
matched the Fleet location and reached the SuperLink as written. The proxy now checks
the raw ``$request_uri`` first and answers 400 to anything not canonical.

``test_canonical_path_rule`` checks the rule itself (the template's regular expression,
which Python's ``re`` reads as nginx's PCRE does) without starting anything. The
deployment test starts a SuperLink and its proxy (``deploy/localfed.py``, one SuperNode)
and sends every path in ``NON_CANONICAL_REQUESTS`` from a device's network namespace,
byte for byte: each gets the proxy's 400, and none reaches the SuperLink's log, while a
canonical Fleet request sent after them does.
"""

from __future__ import annotations

import os
import re
import time
import urllib.parse
from collections.abc import Iterator

import pytest
from localfed import (
    NON_CANONICAL_REQUESTS,
    PROBE_REQUESTS,
    REPO_ROOT,
    LocalFederation,
    why_no_proxy,
)

TEMPLATE = REPO_ROOT / "deploy" / "proxy" / "nginx.conf.template"
REFUSED = "fairfl proxy: non-canonical request path refused"
#: Sent after the refused ones: a Fleet method the SuperLink answers (401, unsigned) and
#: logs, so its line in the SuperLink's log shows the earlier requests had their chance.
CANONICAL = ("POST", "/v1/fleet/get-run")
#: Every path Flower's SuperNode calls (flwr.supernode.fleet_http_client).
FLEET_METHODS = (
    "register-node",
    "activate-node",
    "deactivate-node",
    "unregister-node",
    "send-node-heartbeat",
    "pull-messages",
    "push-messages",
    "get-run",
    "get-fab",
    "push-object",
    "pull-object",
    "confirm-message-received",
)


def _canonical_rule() -> re.Pattern[str]:
    """The regular expression the proxy's server block requires of ``$request_uri``."""
    text = TEMPLATE.read_text()
    server = text[text.index("server {") :]
    found = re.search(r'if \(\$request_uri !~ "([^"]+)"\) \{\s*return 400 ', server)
    assert found is not None, "no canonical-path check in the proxy's server block"
    # Server level and before the first location: it runs before nginx routes.
    first_location = re.search(r"^\s*location ", server, re.MULTILINE)
    assert first_location is not None and found.start() < first_location.start()
    return re.compile(found.group(1))


def test_canonical_path_rule() -> None:
    rule = _canonical_rule()
    for method in FLEET_METHODS:
        assert rule.search(f"/v1/fleet/{method}"), method
    for _, path in PROBE_REQUESTS.values():  # canonical: routed, and 403 unless Fleet
        assert rule.search(path), path
    assert rule.search("/")
    for name, (_, path) in NON_CANONICAL_REQUESTS.items():
        assert not rule.search(path), (name, path)
    # More by hand: each non-canonical form on its own.
    for path in [
        "/v1/fleet/..",
        "/v1/fleet/.../get-run",
        "/v1/fleet/.hidden",
        "/v1/fleet/get-run.",
        "/v1/fleet/%2E",
        "/v1/fleet/%2F",
        "/v1/fleet/get-run;x",
        "/v1/fleet/get-run#x",
        "/v1/fleet/get-run?",
        "v1/fleet/get-run",
        "http://x/v1/fleet/get-run",
        "/v1/fleet/get run",
    ]:
        assert not rule.search(path), path


def _access_lines(log: str) -> list[str]:
    return [line for line in log.splitlines() if "[uvicorn.access]" in line]


def _as_logged_by_superlink(path: str) -> str:
    """The path as uvicorn's access log would write it (decoded, then quoted)."""
    raw, _, query = path.partition("?")
    logged = urllib.parse.quote(urllib.parse.unquote(raw))
    return f"{logged}?{query}" if query else logged


@pytest.fixture(scope="module")
def fed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFederation]:
    """A SuperLink behind its Fleet proxy, one SuperNode; stopped at the end."""
    reason = why_no_proxy()
    if reason is not None:
        pytest.skip(reason)
    network = os.environ.get("FAIRFL_DEPLOY_NETWORK", "auto")
    workdir = tmp_path_factory.mktemp("proxy-paths") / "fed"
    with LocalFederation(workdir, supernodes=1, network=network) as federation:
        yield federation


@pytest.mark.deployment
def test_non_canonical_paths_never_reach_superlink(
    fed: LocalFederation, record_property: pytest.RecordProperty
) -> None:
    record_property("network", fed.mode)
    superlink_log = fed.workdir / "logs" / "superlink.log"
    seen = len(superlink_log.read_text(errors="replace"))

    got = fed.probe_bodies_from_device({**NON_CANONICAL_REQUESTS, "canonical": CANONICAL})

    # The canonical request reached the SuperLink, which wants a signature.
    assert got.pop("canonical")[0] == 401
    # Every other one got the proxy's own 400.
    assert {name: status for name, (status, _) in got.items()} == dict.fromkeys(
        NON_CANONICAL_REQUESTS, 400
    ), got
    assert all(REFUSED in body for _, body in got.values()), got

    # The SuperLink logged the canonical request (sent last) and none of the others, in
    # any spelling: neither raw nor as uvicorn writes a decoded path.
    method, path = CANONICAL
    deadline = time.monotonic() + 15
    while True:
        new = _access_lines(superlink_log.read_text(errors="replace")[seen:])
        if any(f'"{method} {path} HTTP/1.1" 401' in line for line in new):
            break
        assert time.monotonic() < deadline, f"canonical request not in the SuperLink log: {new}"
        time.sleep(0.2)
    # Once: the escapes that decode to it (get%2drun, fleet%2fget-run) never arrived.
    assert len([line for line in new if f" {path} " in line]) == 1, new
    for name, (method, path) in NON_CANONICAL_REQUESTS.items():
        for spelling in {path, _as_logged_by_superlink(path)} - {CANONICAL[1]}:
            assert not [line for line in new if f"{method} {spelling} " in line], (name, new)

    # The proxy's access log has each of them, answered 400 (nginx writes "\" as \x5C).
    access = (fed.workdir / "proxy" / "access.log").read_text(errors="replace")
    for name, (method, path) in NON_CANONICAL_REQUESTS.items():
        logged = path.replace("\\", "\\x5C")
        assert f'"{method} {logged} HTTP/1.1" 400 ' in access, (name, access[-3000:])

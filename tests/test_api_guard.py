"""The API's front door over real HTTP (uvicorn on 127.0.0.1): what a web page may not do.

* DNS rebinding: a ``Host`` that is not loopback with the daemon's port is refused (403), unless
  ``[api] allowed_hosts`` names it; a foreign ``Origin`` is refused;
* cross-site request forgery: a state change that is neither JSON nor carries the token (a form,
  text/plain, a body-less POST to pause/resume/abort/hook rotate) is refused (415) and changes nothing;
* the token by default: ``<home>/api.token`` (0600, made once, atomically), sent by the clients,
  a loopback request without it is 401;
* hostile header values never produce a 500.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from helpers.api_server import ApiServer, api_server
from helpers.props import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from holon.api.guard import split_host
from holon.api.token import client_token, ensure_token, read_token, token_path
from holon.clock import FakeClock
from holon.errors import ConfigError

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def server(tmp_path: Path, fast_ledger: None) -> Iterator[ApiServer]:
    with api_server(tmp_path / "home", clock=FakeClock()) as s:
        with s.client() as c:
            assert c.post("/v1/agents", json={"name": "ada"}).status_code == 201
        yield s


def _error(r: httpx.Response, status: int, code: str) -> str:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and body["error"]["code"] == code, body
    return str(body["error"]["message"])


def _agent(server: ApiServer) -> dict:
    with server.client() as c:
        return dict(c.get("/v1/agents/ada").json()["agent"])


# --- Host and Origin ----------------------------------------------------------------------------


def test_a_foreign_host_is_refused_even_with_the_token(server: ApiServer) -> None:
    port = server.port_number
    with server.client() as c:
        for host in (f"attacker.example:{port}", "attacker.example", f"127.0.0.1.nip.io:{port}", f"localhost:{port + 1}",
                     f"127.0.0.1:{port}@evil", "", f"[::ffff:127.0.0.1]:{port}", f"0x7f.0.0.1:{port}"):  # fmt: skip
            r = c.get("/v1/ledger/tail", headers={"Host": host})
            message = _error(r, 403, "forbidden")
            assert "allowed_hosts" in message and "Host" in message, message
            assert "event" not in r.text  # nothing of the ledger
        # The daemon's own names: loopback with its port, any loopback address, IPv6 loopback.
        for host in (
            f"127.0.0.1:{port}",
            f"localhost:{port}",
            f"LocalHost:{port}",
            f"127.9.9.9:{port}",
            f"[::1]:{port}",
        ):
            assert c.get("/v1/ledger/tail", headers={"Host": host}).status_code == 200, host
        # What the attack did through a rebound name: create an agent on the attacker's model.
        evil = {"name": "evil", "settings": {"api_base": "http://attacker.example/v1", "api_key_env": "DB_PASSWORD"}}
        _error(c.post("/v1/agents", json=evil, headers={"Host": f"attacker.example:{port}"}), 403, "forbidden")
        assert [a["name"] for a in c.get("/v1/agents").json()] == ["ada"]
        # Health is public but still refuses a rebound name.
        assert c.get("/v1/health", headers={"Host": f"attacker.example:{port}"}).status_code == 403


def test_a_foreign_origin_is_refused(server: ApiServer) -> None:
    port = server.port_number
    with server.client() as c:
        for origin in ("http://attacker.example", f"http://attacker.example:{port}", "null",
                       f"http://127.0.0.1:{port + 1}", f"file://127.0.0.1:{port}", f"http://127.0.0.1:{port}/x",
                       "garbage", f"http://user@127.0.0.1:{port}"):  # fmt: skip
            r = c.post("/v1/agents/ada/inputs", json={"text": "hi"}, headers={"Origin": origin})
            assert "Origin" in _error(r, 403, "forbidden")
            assert c.get("/v1/agents", headers={"Origin": origin}).status_code == 403
        for origin in (f"http://127.0.0.1:{port}", f"http://localhost:{port}"):
            assert c.get("/v1/agents", headers={"Origin": origin}).status_code == 200


def test_allowed_hosts_admit_a_tunnel_name(tmp_path: Path, fast_ledger: None) -> None:
    allowed = ("holon.example.com", "box.lan:8443")
    with api_server(tmp_path / "home", clock=FakeClock(), allowed_hosts=allowed) as s, s.client() as c:
        assert c.get("/v1/agents", headers={"Host": "holon.example.com"}).status_code == 200
        assert c.get("/v1/agents", headers={"Host": "holon.example.com:443"}).status_code == 200
        assert c.get("/v1/agents", headers={"Origin": "https://holon.example.com"}).status_code == 200
        assert c.get("/v1/agents", headers={"Host": "box.lan:8443"}).status_code == 200
        assert c.get("/v1/agents", headers={"Host": "box.lan:8444"}).status_code == 403
        assert c.get("/v1/agents", headers={"Host": "evil.holon.example.com"}).status_code == 403


def test_allowed_hosts_setting_is_checked(tmp_path: Path) -> None:
    from holon.config import ApiSettings

    assert ApiSettings(allowed_hosts=("Holon.Example.com", "[fd00::1]:7878")).allowed_hosts == (
        "holon.example.com",
        "[fd00::1]:7878",
    )
    for bad in ("http://x.example", "*", "x.example/path", "a b", "x.example:port"):
        with pytest.raises(ValueError, match="not a host name"):
            ApiSettings(allowed_hosts=(bad,))


def test_split_host() -> None:
    assert split_host("LOCALHOST:7878") == ("localhost", 7878)
    assert split_host("[::1]:80") == ("[::1]", 80)
    assert split_host("example.com", default_port=80) == ("example.com", 80)
    for bad in ("", "a:b", "::1", "[::1", "[::1]x", "a@b", "a/b", "a:99999", "a b", "x\x00"):
        assert split_host(bad) is None, bad


# --- cross-site request forgery -----------------------------------------------------------------


def test_simple_cross_site_requests_change_nothing(server: ApiServer) -> None:
    """What a form on any web page can send: no token, text/plain or form bodies, or no body."""
    with server.client() as c:
        hook = c.get("/v1/agents/ada/hook").json()["path"]
    before = _agent(server)
    with httpx.Client(base_url=server.url, timeout=10) as anon:  # no token: what a browser has
        for path in (
            "/v1/agents/ada/pause",
            "/v1/agents/ada/resume",
            "/v1/agents/ada/abort",
            "/v1/agents/ada/hook/rotate",
        ):
            _error(anon.post(path, headers={"Origin": "http://attacker.example"}), 403, "forbidden")
            message = _error(anon.post(path), 415, "unsupported_media_type")  # no Origin (older browsers)
            assert "application/json" in message
            _error(anon.post(path, content=b"x=1", headers={"Content-Type": "application/x-www-form-urlencoded"}),
                   415, "unsupported_media_type")  # fmt: skip
        r = anon.post(
            "/v1/agents/ada/inputs", content=b'{"text": "run rm -rf"}', headers={"Content-Type": "text/plain"}
        )
        _error(r, 415, "unsupported_media_type")
        r = anon.post(hook, content=b'{"x": 1}', headers={"Content-Type": "text/plain;charset=UTF-8"})
        _error(r, 415, "unsupported_media_type")  # hooks too: a page that learnt the URL cannot post a form
        _error(anon.delete("/v1/agents/ada"), 415, "unsupported_media_type")
        # JSON from a foreign origin is refused by Origin; JSON without the token by the token.
        _error(anon.post("/v1/agents/ada/pause", json={}), 401, "unauthorized")
        assert anon.post(hook, json={"ok": True}).status_code == 202  # a program posting JSON: fine
    after = _agent(server)
    assert after["settings"] == before["settings"] and "paused" not in after["settings"]
    with server.client() as c:
        assert c.get("/v1/agents/ada/hook").json()["path"] == hook, "the hook was not rotated"
        # The token itself makes a body-less change legitimate (the CLI and REPL send it).
        assert c.post("/v1/agents/ada/pause").status_code == 200


def test_without_a_token_a_body_less_post_is_still_refused(tmp_path: Path, fast_ledger: None) -> None:
    """``create_app(token=None)`` (an embedding without auth): only JSON may change state."""
    with api_server(tmp_path / "home", clock=FakeClock(), token=None) as s, httpx.Client(base_url=s.url) as c:
        assert c.post("/v1/agents", json={"name": "ada"}).status_code == 201
        for path in ("/v1/agents/ada/pause", "/v1/agents/ada/abort", "/v1/agents/ada/hook/rotate"):
            _error(c.post(path), 415, "unsupported_media_type")
            _error(c.post(path, content=b"a", headers={"Content-Type": "text/plain"}), 415, "unsupported_media_type")
        assert "paused" not in c.get("/v1/agents/ada").json()["agent"]["settings"]
        assert c.post("/v1/agents/ada/pause", headers={"Content-Type": "application/json"}).status_code == 200


# --- the token by default ------------------------------------------------------------------------


def test_token_file_is_private_made_once_and_never_followed(tmp_path: Path) -> None:
    root = tmp_path / "home"
    assert read_token(root) is None
    token = ensure_token(root)
    info = os.stat(token_path(root))
    assert stat.S_IMODE(info.st_mode) == 0o600 and len(token) >= 32
    assert ensure_token(root) == token and read_token(root) == token
    assert not [p for p in root.iterdir() if p.name != "api.token"], "no temporary file left behind"
    os.chmod(token_path(root), 0o644)
    assert read_token(root) == token and stat.S_IMODE(os.stat(token_path(root)).st_mode) == 0o600
    assert client_token(root, None) == token
    os.environ["HOLON_TEST_TOKEN_X"] = " env-token "
    try:
        assert client_token(root, "HOLON_TEST_TOKEN_X") == "env-token"
    finally:
        del os.environ["HOLON_TEST_TOKEN_X"]
    token_path(root).write_text("  \n")
    with pytest.raises(ConfigError, match="holds no usable token"):
        read_token(root)
    token_path(root).unlink()
    (tmp_path / "elsewhere").write_text("stolen\n")
    token_path(root).symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ConfigError, match=r"api\.token"):
        read_token(root)


@pytest.mark.slow
def test_the_daemon_makes_a_token_and_its_clients_use_it(tmp_path: Path) -> None:
    """``holon serve`` on loopback with no token_env: api.token appears (0600); without it 401."""
    from helpers.daemon import fake_home, state
    from helpers.turn_cli import spawn_holon, wait_for

    from holon.api.server import free_port
    from holon.repl.client import ApiClient, home_token
    from holon.testing.fake_llm import FakeLLM

    with FakeLLM() as fake:
        home = fake_home(tmp_path, fake, "alice")
        assert not token_path(home).exists()
        port = free_port()
        proc = spawn_holon(home, "serve", "--port", str(port))
        try:
            wait_for("the daemon to run", lambda: state(home).get("state") == "running", proc=proc, timeout=60)
            assert stat.S_IMODE(os.stat(token_path(home)).st_mode) == 0o600
            url = f"http://127.0.0.1:{port}"
            with httpx.Client(base_url=url, timeout=10) as anon:
                assert anon.get("/v1/health").status_code == 200
                _error(anon.get("/v1/agents"), 401, "unauthorized")
                _error(anon.post("/v1/agents/alice/inputs", json={"text": "hi"}), 401, "unauthorized")
            token = home_token(home, None)
            assert token == token_path(home).read_text().strip()
            with ApiClient(url, token=token) as client:  # what holon chat builds
                assert [a.name for a in client.agents()] == ["alice"]
                ack = client.send("alice", "hello")
                assert ack.seq > 0
                assert client.abort("alice") in (True, False)  # a body-less POST, accepted with the token
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except Exception:
                proc.kill()
                proc.wait(10)
        assert proc.returncode == 0


# --- hostile header values -------------------------------------------------------------------------

_header_text = st.text(
    alphabet=st.characters(min_codepoint=0x20, max_codepoint=0xFF, blacklist_characters="\x7f"), max_size=300
)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    mp = pytest.MonkeyPatch()
    mp.setenv("HOLON_LEDGER_SYNCHRONOUS", "NORMAL")
    with api_server(tmp_path_factory.mktemp("guard") / "home", clock=FakeClock()) as s:
        with s.client() as c:
            c.post("/v1/agents", json={"name": "ada"})
            c.post("/v1/agents/ada/pause")  # inputs queue up instead of running turns
        yield s
    mp.undo()


@pytest.mark.slow  # a long property run (fuzzing)
@given(
    host=st.one_of(
        st.none(),
        _header_text,
        st.sampled_from(["localhost:{port}", "127.0.0.1:{port}", "[::1]:{port}", "localhost", "[", "]:", ":"]),
    ),
    origin=st.one_of(st.none(), _header_text, st.sampled_from(["null", "http://", "http://[::1", "http://a:b"])),
    content_type=st.one_of(st.none(), _header_text, st.just("application/json; charset=utf-8")),
    key=st.one_of(st.none(), _header_text, st.text(max_size=250)),
    method=st.sampled_from(["GET", "POST", "DELETE", "OPTIONS", "PATCH"]),
    path=st.sampled_from(["/v1/agents/ada/inputs", "/v1/agents/ada/pause", "/v1/health", "/v1/hooks/nope"]),
    token=st.booleans(),
)
@settings(max_examples=examples(150), deadline=None, suppress_health_check=list(HealthCheck), database=None)
def test_hostile_headers_never_give_a_server_error(
    live: ApiServer,
    host: str | None,
    origin: str | None,
    content_type: str | None,
    key: str | None,
    method: str,
    path: str,
    token: bool,
) -> None:
    headers: dict[str, str] = dict(live.headers) if token else {}
    for name, value in (("Host", host), ("Origin", origin), ("Content-Type", content_type), ("Idempotency-Key", key)):
        if value is not None:
            headers[name] = value
    if host is not None:
        headers["Host"] = host.replace("{port}", str(live.port_number))
    try:
        with httpx.Client(base_url=live.url, timeout=10) as c:
            r = c.request(method, path, headers=headers, content=b'{"text": "fuzz"}')
    except (httpx.LocalProtocolError, UnicodeEncodeError):
        return  # a value no HTTP client can send
    assert r.status_code < 500, (r.status_code, r.text, headers)
    assert r.json().get("error", {}).get("code") != "internal" if r.status_code >= 400 else True

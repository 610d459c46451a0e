"""``POST /v1/ledger/verify`` on a damaged ledger answers 200 with the bad rows, never a 500."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from helpers.api_server import api_server

from holon.clock import FakeClock


def test_http_verify_names_a_row_that_is_no_longer_utf8(tmp_path: Path, fast_ledger: None) -> None:
    home = tmp_path / "home"
    with api_server(home, clock=FakeClock()) as server, server.client(timeout=30) as client:
        r = client.post("/v1/agents", json={"name": "ada"}, headers={"Content-Type": "application/json"})
        assert r.status_code == 201, r.text
        conn = sqlite3.connect(home / "holon.db", isolation_level=None)
        try:
            conn.execute("DROP TRIGGER events_no_update")
            text = conn.execute("SELECT payload FROM events WHERE seq = 1").fetchone()[0].encode()
            damaged = text.replace(b"ada", b"a\xffa", 1)  # one byte no longer UTF-8, as a bad disk leaves it
            conn.execute("UPDATE events SET payload = CAST(? AS TEXT) WHERE seq = 1", (damaged,))
        finally:
            conn.close()
        r = client.post("/v1/ledger/verify", headers={"Content-Type": "application/json"})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["ok"] is False and body["first_bad_seq"] == 1 and body["damaged"] is False, body
        assert body["bad_rows"][0]["seq"] == 1 and "UTF-8" in body["bad_rows"][0]["reason"], body

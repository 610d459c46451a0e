"""Dashboard sessions: one-time login codes, session cookies and their CSRF tokens (RFC 0009, "Security").

A browser cannot send the API's bearer header when it opens a URL, so the dashboard logs in once
and keeps a session cookie (HttpOnly, SameSite=Strict). Two ways in, both proving the operator
holds the token:

* a **one-time code** (``holon dashboard --url``): a client with the token asks the daemon for one
  (``POST /v1/dashboard/login``); the code opens one session, once, within ``CODE_TTL_S``;
* the **token itself**, typed into the login page (a browser on another machine).

A cookie alone never authorises a change: each session has its own CSRF token, written into every
page, and a state-changing dashboard request must carry it in the ``X-Holon-CSRF`` header (a
cross-site page can neither read it nor set a custom header without a CORS preflight, which is never
answered). Sessions live in the daemon's memory: a restart logs everyone out, which is the safe side.

Pure bookkeeping on an injected monotonic clock; no I/O, no web framework.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["CODE_TTL_S", "MAX_SESSIONS", "SESSION_TTL_S", "Session", "Sessions"]

CODE_TTL_S = 120.0
"""How long a login code may wait to be opened: long enough to click, short enough not to linger."""
SESSION_TTL_S = 12 * 3600.0
"""A session's life since it was last used (a working day)."""
MAX_SESSIONS = 64
"""Sessions kept at once; the least recently used goes first (a bounded table, whatever is sent)."""
MAX_CODES = 64
"""Unopened login codes kept at once."""


@dataclass(slots=True)
class Session:
    session_id: str
    csrf: str
    used_at: float


class Sessions:
    """Login codes and sessions of one daemon, in memory."""

    def __init__(self, *, now: Callable[[], float] = time.monotonic) -> None:
        self._now = now
        self._codes: OrderedDict[str, float] = OrderedDict()
        self._sessions: OrderedDict[str, Session] = OrderedDict()

    def new_code(self) -> str:
        """A one-time login code, valid for ``CODE_TTL_S``."""
        self._expire()
        code = secrets.token_urlsafe(24)
        self._codes[code] = self._now() + CODE_TTL_S
        while len(self._codes) > MAX_CODES:
            self._codes.popitem(last=False)
        return code

    def redeem(self, code: str) -> Session | None:
        """A new session for a valid, unused code (which is used up); ``None`` otherwise."""
        self._expire()
        found = next((c for c in self._codes if hmac.compare_digest(c.encode(), code.encode())), None)
        if found is None:
            return None
        del self._codes[found]
        return self.open()

    def open(self) -> Session:
        """A new session (after the token or a code proved who asks)."""
        self._expire()
        session = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32), self._now())
        self._sessions[session.session_id] = session
        while len(self._sessions) > MAX_SESSIONS:
            self._sessions.popitem(last=False)
        return session

    def get(self, session_id: str | None) -> Session | None:
        """The live session with this id (its life restarts), else ``None``."""
        if not session_id:
            return None
        self._expire()
        session = self._sessions.get(session_id)
        if session is None:
            return None
        session.used_at = self._now()
        self._sessions.move_to_end(session_id)
        return session

    def close(self, session_id: str | None) -> None:
        if session_id:
            self._sessions.pop(session_id, None)

    @staticmethod
    def csrf_ok(session: Session, given: str | None) -> bool:
        """The request carries this session's CSRF token (compared in constant time)."""
        return given is not None and hmac.compare_digest(session.csrf.encode(), given.encode())

    def _expire(self) -> None:
        now = self._now()
        for code in [c for c, until in self._codes.items() if until <= now]:
            del self._codes[code]
        for sid in [s for s, v in self._sessions.items() if v.used_at + SESSION_TTL_S <= now]:
            del self._sessions[sid]

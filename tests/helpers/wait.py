"""Waiting for a state: poll a predicate until it holds or a deadline passes (never a fixed sleep)."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["await_for", "wait_for"]

POLL_S = 0.02
MIN_TIMEOUT_S = 60.0
"""The shortest deadline: one only a failing test waits out, so it is generous for loaded machines
(two workers, a busy CI host), where starting a daemon alone can take half a minute."""


def wait_for(
    what: str, cond: Callable[[], Any], *, timeout: float = 60, proc: subprocess.Popen[str] | None = None
) -> Any:
    """``cond()``'s first truthy value; AssertionError naming ``what`` after ``timeout`` seconds, or
    as soon as ``proc`` (when given) exits, with what it printed. ``timeout`` is at least ``MIN_TIMEOUT_S``."""
    timeout = max(timeout, MIN_TIMEOUT_S)
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"process exited ({proc.returncode}) before {what}:\n{out}\n{err}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(POLL_S)


async def await_for(what: str, cond: Callable[[], Any | Awaitable[Any]], *, timeout: float = 60) -> Any:
    """``wait_for`` inside an event loop: ``cond`` may be a coroutine function; the loop keeps running."""
    timeout = max(timeout, MIN_TIMEOUT_S)
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(POLL_S)

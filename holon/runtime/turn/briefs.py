"""The operator's notices when a turn fails: inputs rejected, or inputs waiting to be retried."""

from __future__ import annotations

from collections.abc import Sequence

from holon.ledger import events as ev

__all__ = ["rejection_brief", "waiting_brief"]


def rejection_brief(inputs: Sequence[int], reason: str) -> ev.BriefDelivered:
    """The operator's notice that ``inputs`` were settled unanswered, and why."""
    refs = ", ".join(f"event:{s}" for s in inputs)
    noun = "input" if len(inputs) == 1 else "inputs"
    return ev.BriefDelivered(
        kind="error",
        text=f"Not answered: {noun} {refs} rejected by a failed turn: {reason.rstrip('.')}. Send it again to retry.",
    )


def waiting_brief(reason: str) -> ev.BriefDelivered:
    """The operator's notice that a turn failed and its inputs wait to be retried, and why."""
    return ev.BriefDelivered(
        kind="error",
        text=(
            f"Not answered yet: {reason.rstrip('.')}. The input stays queued and is retried with backoff; "
            "fix the agent's model (holon agent configure, or /model in the REPL) and it runs."
        ),
    )

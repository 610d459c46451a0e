"""The fence an append transaction carries: which node appends, with which token per agent.

The database checks it (migration 2's ``holon_fence`` trigger on ``events``): an event of a fenced
type for agent X is refused unless the transaction's ``holon.fence`` setting names X's live lease,
node and token both (RFC 0008, "Leases with fencing tokens"). The setting is JSON so that one
transaction (a group commit) can carry the tokens of several agents:
``{"node":"n1","tokens":{"agt_x":3}}``. The token is compared, not only the node: a node that lost
an agent and won it back must not let a turn still running under the old token append.

Pure data, no driver: ``holon.ledger.pg.append`` sends it with ``BEGIN``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = ["FENCE_SETTING", "Fence"]

FENCE_SETTING = "holon.fence"
"""The custom setting the trigger reads (``SELECT set_config('holon.fence', ..., true)``: local to
the transaction, gone at COMMIT or ROLLBACK)."""


@dataclass(frozen=True, slots=True)
class Fence:
    """``node`` appends for each agent of ``tokens`` holding that fencing token."""

    node: str
    tokens: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tokens", MappingProxyType(dict(self.tokens)))

    def setting(self) -> str:
        """The value of ``holon.fence`` (compact JSON, keys sorted)."""
        return json.dumps({"node": self.node, "tokens": dict(self.tokens)}, separators=(",", ":"), sort_keys=True)

    def with_token(self, agent_id: str, token: int) -> Fence:
        return Fence(self.node, {**self.tokens, agent_id: token})

"""Peers a bench measures in the same run when their package is installed (dev dependencies of the
benches only, never of holon): each says whether it can run and which version ran."""

from __future__ import annotations

import importlib
from importlib.metadata import version
from typing import ClassVar

__all__ = ["OptionalPeer"]


class OptionalPeer:
    module: ClassVar[str]  # what the peer imports
    distribution: ClassVar[str]  # its package on the index

    @classmethod
    def available(cls) -> bool:
        try:
            importlib.import_module(cls.module)
        except ImportError:
            return False
        return True

    @classmethod
    def version(cls) -> str:
        return version(cls.distribution)

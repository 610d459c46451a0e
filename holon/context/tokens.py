"""Token counting with tiktoken, offline. The only module that imports tiktoken.

tiktoken downloads its BPE files on first use, which fails on an offline machine; litellm ships
the files for cl100k_base and o200k_base, so ``TIKTOKEN_CACHE_DIR`` is pointed at them (found
without importing litellm) before tiktoken loads.

Models whose tokenizer tiktoken does not know (Claude, Llama, Qwen, SmolLM...) are counted with
o200k_base times ``FOREIGN_SAFETY``: other tokenizers usually need more tokens for the same text,
and a budget must never be overrun because of a count that was too low.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

__all__ = ["FOREIGN_SAFETY", "MESSAGE_OVERHEAD", "TokenCounter", "encoding_for", "warm_encodings"]

#: Multiplier for models counted with a tokenizer that is not their own.
FOREIGN_SAFETY = 1.2
#: Tokens a chat message costs beyond its content (role, separators), per OpenAI's accounting.
MESSAGE_OVERHEAD = 4
_CACHE_LIMIT = 200_000


def _point_at_bundled_files() -> None:
    if os.environ.get("TIKTOKEN_CACHE_DIR"):
        return
    spec = importlib.util.find_spec("litellm")
    if spec is None or spec.origin is None:
        return
    folder = Path(spec.origin).parent / "litellm_core_utils" / "tokenizers"
    if folder.is_dir():
        os.environ["TIKTOKEN_CACHE_DIR"] = str(folder)


@cache
def _encoding(name: str) -> Any:
    _point_at_bundled_files()
    import tiktoken

    return tiktoken.get_encoding(name)


def encoding_for(model: str) -> tuple[str, float]:
    """(tiktoken encoding name, safety factor) for a litellm model name."""
    _point_at_bundled_files()
    import tiktoken

    bare = model.split("/", 1)[1] if "/" in model else model
    try:
        return tiktoken.encoding_for_model(bare).name, 1.0
    except KeyError:
        return "o200k_base", FOREIGN_SAFETY


def warm_encodings(models: Iterable[str]) -> None:
    """Load the tokenizers of ``models`` now (each is read once per process: o200k_base takes
    ~0.4 s), so that the first turn that counts with one does not (``holon.daemon.warm``)."""
    for name in sorted({encoding_for(m)[0] for m in models}):
        _encoding(name)


class TokenCounter:
    """Counts tokens of text, messages and tool schemas; remembers what it counted."""

    def __init__(self, model: str = "gpt-4o") -> None:
        self.model = model
        self.encoding_name, self.safety = encoding_for(model)
        self._enc = _encoding(self.encoding_name)
        self._cache: dict[str, int] = {}

    def count(self, text: str) -> int:
        n = self._cache.get(text)
        if n is None:
            raw = len(self._enc.encode(text, disallowed_special=()))
            n = int(raw * self.safety + 0.999) if self.safety != 1.0 else raw
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            self._cache[text] = n
        return n

    def message(self, message: dict[str, Any]) -> int:
        """Tokens of one chat message: content, tool calls and the per-message overhead."""
        total = MESSAGE_OVERHEAD
        content = message.get("content")
        if isinstance(content, str):
            total += self.count(content)
        elif isinstance(content, list):
            total += sum(self.count(part.get("text", "")) for part in content if isinstance(part, dict))
        for call in message.get("tool_calls") or ():
            fn = call.get("function", {})
            total += self.count(fn.get("name", "")) + self.count(fn.get("arguments", "")) + MESSAGE_OVERHEAD
        return total

    def tools(self, schemas: list[dict[str, Any]] | tuple[dict[str, Any], ...]) -> int:
        return sum(self.count(json.dumps(s, sort_keys=True, ensure_ascii=False)) for s in schemas)

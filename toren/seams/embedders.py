"""Embedders: text to vectors for semantic recall of memories (``memory.embeddings``).

A plugin registers them with ``register_embedders``; an agent names one in agent.yaml
(``memory: {embeddings: toren/hash}``). The task loop embeds what ``remember`` and
``update_memory`` write and what ``recall`` asks, and the store ranks memories by similarity
beside full-text relevance where it can (the Postgres store: with pgvector loaded).
"""

from __future__ import annotations

import abc
from collections.abc import Sequence


class Embedder(abc.ABC):
    """Turns texts into vectors of ``dimensions`` floats, the same text always into the same
    vector (a memory's vector is kept; its query's is made at each recall).

    ``name`` is what agents write under ``memory.embeddings`` (``provider/model``, such as
    ``openai/text-embedding-3-small``); two plugins registering one name is an error naming
    both. ``embed`` is called by the task loop with the texts of one memory call; it may call a
    provider over the network (a failure is the tool call's error result, and the memory is
    written without a vector then: it is still found by its words).
    """

    #: What agents name it by, ``provider/model``.
    name: str = ""
    #: The length of every vector ``embed`` returns.
    dimensions: int = 0
    #: One line for ``toren plugins``.
    description: str = ""

    @abc.abstractmethod
    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order, each ``dimensions`` long."""

"""The audit trail's prompts: the text of every system prompt a task ran with."""

from __future__ import annotations

import abc
from collections.abc import Sequence


class PromptStore(abc.ABC):
    """System prompts, content-addressed: each distinct prompt is kept once, under the SHA-256
    that ``TaskStarted`` records as ``prompt_sha256``.

    The task loop calls ``save_prompt`` before it records the ``TaskStarted`` that names the
    prompt, so every prompt a run's log names can be read back; ``Runtime.receipt`` (and so
    ``toren jobs show --prompts``) calls ``load_prompts``.
    """

    @abc.abstractmethod
    async def save_prompt(self, agent: str, sha256: str, text: str) -> None:
        """Keep ``text`` under ``sha256`` in ``agent``'s schema; nothing if it is kept."""

    @abc.abstractmethod
    async def load_prompts(self, agent: str, hashes: Sequence[str]) -> dict[str, str]:
        """The kept prompts among ``hashes`` (SHA-256 -> text)."""

"""A small Bot API client over aiohttp: one method, ``call``, and the errors it raises.

Why not aiogram: Toren needs to decide when an update is acknowledged (only after it is
committed to Postgres), and aiogram's dispatcher confirms the getUpdates offset itself; the
methods used here (getUpdates, sendMessage, sendChatAction, answerCallbackQuery, setWebhook,
getFile and the file download) are a few lines each, and the raw API keeps the dependency to
aiohttp, which the kernel already uses.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import aiohttp

from toren.plugin import ChannelError, read_at_most

DEFAULT_API_URL = "https://api.telegram.org"


class BotApi:
    """Calls to one bot's Bot API. The token is part of every URL: it never appears in an
    error message or a log line (only the method does)."""

    def __init__(self, session: aiohttp.ClientSession, token: str,
                 api_url: str = DEFAULT_API_URL) -> None:
        self.session = session
        self._base = f"{api_url.rstrip('/')}/bot{token}/"
        self._files = f"{api_url.rstrip('/')}/file/bot{token}/"

    async def call(self, method: str, params: dict[str, Any] | None = None, *,
                   timeout_s: float = 30.0) -> Any:
        """The ``result`` of ``method``; ``ChannelError`` (retryable for 429, 409, 5xx and
        network failures, with the ``retry_after`` Telegram asked for) otherwise."""
        try:
            async with self.session.post(self._base + method, json=params or {},
                                         timeout=aiohttp.ClientTimeout(total=timeout_s)
                                         ) as response:
                status = response.status
                try:
                    body = await response.json(content_type=None)
                except ValueError:
                    body = None
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise ChannelError(f"Telegram {method}: {type(exc).__name__} (network)",
                               retryable=True) from None
        if isinstance(body, dict) and body.get("ok") and status == 200:
            return body.get("result")
        description = str(body.get("description", ""))[:300] if isinstance(body, dict) else ""
        parameters = body.get("parameters") if isinstance(body, dict) else None
        retry_after = None
        if isinstance(parameters, dict) and isinstance(parameters.get("retry_after"), int | float):
            retry_after = float(parameters["retry_after"])
        retryable = status in (409, 429) or status >= 500 or body is None
        raise ChannelError(f"Telegram {method} answered {status}: "
                           f"{description or 'no description'}",
                           retryable=retryable, retry_after_s=retry_after, status=status)

    async def download(self, file_path: str, *, max_bytes: int, timeout_s: float = 120.0
                       ) -> bytes:
        """The file ``getFile`` gave ``file_path`` for (``GET /file/bot<token>/<file_path>``),
        read until it ends or passes ``max_bytes`` (then what was read, ``max_bytes`` + 1
        bytes or more, is returned: the caller refuses it as too large). ``ChannelError``
        (retryable for 429, 5xx and network failures) otherwise; like ``call``'s, its message
        never holds the token."""
        try:
            async with self.session.get(self._files + quote(file_path),
                                        timeout=aiohttp.ClientTimeout(total=timeout_s)
                                        ) as response:
                status = response.status
                if status == 200:
                    return await read_at_most(response, max_bytes)
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise ChannelError(f"Telegram file download: {type(exc).__name__} (network)",
                               retryable=True) from None
        raise ChannelError(f"Telegram file download answered {status}",
                           retryable=status == 429 or status >= 500, status=status)



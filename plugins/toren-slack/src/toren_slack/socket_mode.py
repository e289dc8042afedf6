"""Socket Mode: Slack pushes events over a WebSocket the app opens, for deployments without a
public URL. Only the process holding the agent's poller lease connects.

Not slack_sdk's ``SocketModeClient``: it hands envelopes to listeners that acknowledge them
as they see fit, where Toren must acknowledge an envelope only after its update is committed
to the database (the ``fetch_updates`` -> record -> ``acknowledge`` order of ``ChatChannel``).
An envelope that is never acknowledged (the process died first) is sent again by Slack, to
whichever connection is open then; the update id makes the second delivery a no-op.
"""

from __future__ import annotations

import contextlib
import json
import logging
from typing import Any

import aiohttp
from slack_sdk.web.async_client import AsyncWebClient

from toren.plugin import ChannelError
from toren_slack.api import call

log = logging.getLogger(__name__)

#: Most envelopes taken per fetch (the base records them one by one before acknowledging).
MAX_ENVELOPES = 50
#: Largest WebSocket message accepted (an envelope is a few kilobytes).
MAX_MESSAGE_BYTES = 1024 * 1024


class SocketModeLink:
    """One agent's Socket Mode connection: opened on demand with ``apps.connections.open``,
    reopened after Slack's ``disconnect`` message or a broken socket."""

    def __init__(self, session: aiohttp.ClientSession, app_client: AsyncWebClient) -> None:
        self._session = session
        self._app_client = app_client
        self._socket: aiohttp.ClientWebSocketResponse | None = None
        #: Connections opened so far (a test reads it; logs show it).
        self.connections = 0

    async def _connected(self) -> aiohttp.ClientWebSocketResponse:
        if self._socket is not None and not self._socket.closed:
            return self._socket
        answer = await call(self._app_client, "apps.connections.open")
        url = answer.get("url")
        if not isinstance(url, str) or not url.startswith(("wss://", "ws://")):
            raise ChannelError("Slack apps.connections.open answered no WebSocket URL",
                               retryable=True)
        try:
            self._socket = await self._session.ws_connect(
                url, heartbeat=30.0, max_msg_size=MAX_MESSAGE_BYTES,
                timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=5.0))
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise ChannelError(f"Slack Socket Mode: connecting failed: {type(exc).__name__}",
                               retryable=True) from None
        self.connections += 1
        return self._socket

    async def receive(self, wait_s: float) -> list[dict[str, Any]]:
        """The envelopes (``events_api``, ``interactive``, ...) Slack sends within ``wait_s``
        seconds of the first wait, and then any that follow at once; ``[]`` if none came.
        A ``disconnect`` message closes the socket (the next call opens another); a broken
        socket is a retryable ``ChannelError`` unless envelopes were read before it broke."""
        socket = await self._connected()
        envelopes: list[dict[str, Any]] = []
        timeout = wait_s
        while len(envelopes) < MAX_ENVELOPES:
            try:
                message = await socket.receive(timeout=timeout)
            except TimeoutError:
                break
            if message.type == aiohttp.WSMsgType.TEXT:
                try:
                    data = json.loads(message.data)
                except ValueError:
                    log.warning("slack: a Socket Mode message that is not JSON was ignored")
                    continue
                if not isinstance(data, dict):
                    continue
                if data.get("type") == "disconnect":
                    log.info("slack: Socket Mode asked to reconnect (%s)",
                             str(data.get("reason", ""))[:50])
                    await self.close()
                    break
                if isinstance(data.get("envelope_id"), str):
                    envelopes.append(data)
                    timeout = 0.05  # what is already on its way, then hand them over
                continue
            if message.type in (aiohttp.WSMsgType.PING, aiohttp.WSMsgType.PONG):
                continue
            # closed, closing or broken: the envelopes read so far are recorded (Slack sends
            # the unacknowledged ones again on the next connection)
            await self.close()
            if envelopes:
                break
            raise ChannelError("Slack Socket Mode: the connection closed", retryable=True)
        return envelopes

    async def acknowledge(self, envelope_ids: list[str]) -> None:
        """Acknowledge envelopes on the connection they came on; if it is gone, Slack sends
        them again (and they are duplicates by then)."""
        socket = self._socket
        for envelope_id in envelope_ids:
            if socket is None or socket.closed:
                return
            try:
                await socket.send_str(json.dumps({"envelope_id": envelope_id}))
            except (ConnectionError, aiohttp.ClientError, RuntimeError) as exc:
                log.info("slack: acknowledging an envelope failed (%s); Slack will resend it",
                         type(exc).__name__)
                await self.close()
                return

    async def close(self) -> None:
        socket, self._socket = self._socket, None
        if socket is not None:
            with contextlib.suppress(aiohttp.ClientError, OSError, RuntimeError, TimeoutError):
                await socket.close()

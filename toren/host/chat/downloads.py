"""Reading a file a person sent from a chat platform, without reading more than Toren keeps."""

from __future__ import annotations

import aiohttp

#: Bytes per piece as a platform's file is read.
DOWNLOAD_CHUNK_BYTES = 256 * 1024


async def read_at_most(response: aiohttp.ClientResponse, max_bytes: int) -> bytes:
    """A response's body, or its first pieces once they pass ``max_bytes`` (the caller
    refuses a result longer than ``max_bytes``): what ``ChatChannel.download_file``
    implementations read a platform's file with, so an oversized file costs at most a piece
    more than the limit in memory."""
    pieces: list[bytes] = []
    received = 0
    async for piece in response.content.iter_chunked(DOWNLOAD_CHUNK_BYTES):
        pieces.append(piece)
        received += len(piece)
        if received > max_bytes:
            break  # the rest is not read: leaving the response's block closes the connection
    return b"".join(pieces)

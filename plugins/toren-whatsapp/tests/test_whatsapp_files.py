"""Images and PDFs sent on WhatsApp reach the model (issue 38 §4): signed webhooks on a real
Toren server, the fake Graph API's media lookup and download, real Postgres and the offline
model, which ends its answer with what it was shown."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import psycopg
from fake_graph import APP_SECRET, FRIEND, FakeGraph
from test_whatsapp_channel import notification, post, text, until
from toren_whatsapp.channel import parse_notification
from toren_whatsapp.signature import sign

from toren.host.runtime import Runtime
from toren.testing import pdf_bytes, png_bytes

Agent = Callable[..., Awaitable[tuple[Runtime, str]]]


def image(message_id: str, media_id: str, *, caption: str | None = None,
          mime_type: str = "image/jpeg", timestamp: int = 1_700_000_000) -> dict[str, Any]:
    media = {"id": media_id, "mime_type": mime_type, "sha256": "x"} | (
        {"caption": caption} if caption is not None else {})
    return {"from": FRIEND, "id": message_id, "timestamp": str(timestamp), "type": "image",
            "image": media}


def document(message_id: str, media_id: str, filename: str, mime_type: str, *,
             caption: str | None = None, timestamp: int = 1_700_000_000) -> dict[str, Any]:
    media = {"id": media_id, "mime_type": mime_type, "sha256": "x", "filename": filename} | (
        {"caption": caption} if caption is not None else {})
    return {"from": FRIEND, "id": message_id, "timestamp": str(timestamp),
            "type": "document", "document": media}


async def deliver(url: str, *messages: dict[str, Any]) -> None:
    raw = json.dumps(notification(*messages)).encode()
    async with aiohttp.ClientSession() as http:
        assert await post(http, url, raw, sign(raw, APP_SECRET)) == 200


async def user_entries(runtime: Runtime) -> list[dict[str, Any]]:
    (run,) = await runtime.list_runs(agent="bot", kind="session")
    session = await runtime.get_session(run.id)
    return [entry for entry in session["transcript"] if entry["role"] == "user"]


def stored_files(database_url: str) -> list[tuple[str, str, str]]:
    with psycopg.connect(database_url) as conn:
        return [tuple(row) for row in conn.execute(
            "SELECT name, content_type, uploaded_by FROM toren_control.files "
            "ORDER BY created_at").fetchall()]


def test_images_and_documents_are_parsed_with_their_captions() -> None:
    body = notification(image("wamid.1", "501", caption="look"),
                        document("wamid.2", "502", "report.pdf", "application/pdf"),
                        {"from": FRIEND, "id": "wamid.3", "timestamp": "1", "type": "image",
                         "image": {"mime_type": "image/png"}},  # no media id: skipped
                        {"from": FRIEND, "id": "wamid.4", "timestamp": "1", "type": "audio",
                         "audio": {"id": "503", "mime_type": "audio/ogg; codecs=opus"}})
    updates = parse_notification("bot", "1098765", body)
    assert [(u.update_id, u.kind, u.text, u.payload["files"]) for u in updates] == [
        ("wamid.1", "message", "look", [{"ref": "501", "name": "image-1700000000",
                                         "content_type": "image/jpeg", "size": None}]),
        ("wamid.2", "message", "", [{"ref": "502", "name": "report.pdf",
                                     "content_type": "application/pdf", "size": None}])]


async def test_an_image_with_a_caption_reaches_the_model_as_an_attachment(
        whatsapp_agent: Agent, fake_graph: FakeGraph, database_url: str) -> None:
    runtime, url = await whatsapp_agent()
    photo = png_bytes(800, 600, (30, 160, 90))
    await deliver(url, image("wamid.img", fake_graph.media(photo, "image/png"),
                             caption="what plant is this?", mime_type="image/png"))
    await until(lambda: fake_graph.texts(FRIEND))
    (reply,) = fake_graph.texts(FRIEND)
    assert reply.startswith("You said: what plant is this?")
    assert reply.endswith(f"I was shown:\n- image-1700000000.png (image/png, 800x600 px): "
                          f"{len(photo):,} bytes received")
    (entry,) = await user_entries(runtime)
    (attachment,) = entry["attachments"]
    assert attachment["name"] == "image-1700000000.png" and attachment["height"] == 600
    assert stored_files(database_url) == [("image-1700000000.png", "image/png",
                                           f"whatsapp:{FRIEND}")]


async def test_a_pdf_document_without_a_caption_reaches_the_model(
        whatsapp_agent: Agent, fake_graph: FakeGraph) -> None:
    runtime, url = await whatsapp_agent()
    pdf = pdf_bytes("Minutes of the meeting.")
    await deliver(url, document("wamid.doc", fake_graph.media(pdf, "application/pdf"),
                                "minutes.pdf", "application/pdf"))
    await until(lambda: fake_graph.texts(FRIEND))
    (reply,) = fake_graph.texts(FRIEND)
    assert reply.endswith(f"I was shown:\n- minutes.pdf (application/pdf): {len(pdf):,} bytes "
                          "received")
    (entry,) = await user_entries(runtime)
    assert entry["attachments"][0]["pages"] == 1


async def test_a_file_too_large_or_not_what_it_says_gets_a_reply_and_the_chat_goes_on(
        whatsapp_agent: Agent, fake_graph: FakeGraph, database_url: str) -> None:
    runtime, url = await whatsapp_agent(runtime_settings={"max_file_bytes": 1_000_000})
    big = png_bytes(4, 4) + b"\0" * 1_500_000  # the lookup says its size: not downloaded
    fake = b"just some text, not a picture"
    await deliver(url,
                  image("wamid.big", fake_graph.media(big, "image/png"), caption="big one",
                        mime_type="image/png", timestamp=1_700_000_001),
                  document("wamid.fake", fake_graph.media(fake, "application/pdf"),
                           "scan.pdf", "application/pdf", timestamp=1_700_000_002),
                  text("wamid.after", FRIEND, "still there?", 1_700_000_003))
    await until(lambda: len(fake_graph.texts(FRIEND)) == 4)
    await asyncio.sleep(0.5)
    refusal, reply, not_pdf, after = fake_graph.texts(FRIEND)
    assert refusal == ("Sorry, I could not take image-1700000001.png: it is 1.5 MB, and "
                       "files here may be at most 1.0 MB.")
    assert reply.startswith("You said: big one\n\n(image-1700000001.png was sent too but "
                            "could not be taken")
    assert not_pdf.startswith("Sorry, I could not take scan.pdf: the name says PDF but the "
                              "content is text")
    assert after == "You said: still there?"
    assert fake_graph.downloads == [fake_graph_id(fake_graph, fake)]
    assert [entry["text"].split("\n")[0] for entry in await user_entries(runtime)] == [
        "big one", "still there?"]
    assert stored_files(database_url) == []


def fake_graph_id(fake: FakeGraph, data: bytes) -> str:
    return next(media_id for media_id, (held, _type) in fake.media_files.items()
                if held == data)


async def test_a_failed_media_download_is_retried_then_the_person_is_told(
        whatsapp_agent: Agent, fake_graph: FakeGraph) -> None:
    _runtime, url = await whatsapp_agent()
    photo = png_bytes(16, 16)
    fake_graph.fail_media("lookup", 503)
    fake_graph.fail_media("download", 500)
    await deliver(url, image("wamid.r1", fake_graph.media(photo, "image/png"),
                             caption="one", mime_type="image/png"))
    await until(lambda: fake_graph.texts(FRIEND), within=30)
    assert fake_graph.texts(FRIEND)[0].endswith(f"{len(photo):,} bytes received")

    fake_graph.fail_media("download", 500, times=20)
    await deliver(url, image("wamid.r2", fake_graph.media(photo, "image/png"), caption="two",
                             mime_type="image/png", timestamp=1_700_000_005))
    await until(lambda: len(fake_graph.texts(FRIEND)) == 3, within=40)
    _one, refusal, two = fake_graph.texts(FRIEND)
    assert refusal == ("Sorry, I could not take image-1700000005.png: it could not be "
                       "downloaded. Please send it again.")
    assert two.startswith("You said: two\n\n(image-1700000005.png was sent too")


async def test_a_redelivered_image_notification_is_downloaded_and_answered_once(
        whatsapp_agent: Agent, fake_graph: FakeGraph, database_url: str) -> None:
    runtime, url = await whatsapp_agent()
    message = image("wamid.dup", fake_graph.media(png_bytes(8, 8), "image/png"),
                    caption="once", mime_type="image/png")
    await deliver(url, message)
    await deliver(url, message)  # Meta redelivers
    await until(lambda: fake_graph.texts(FRIEND))
    await deliver(url, message)  # and again after the answer
    await asyncio.sleep(1.5)
    assert len(fake_graph.texts(FRIEND)) == 1
    assert len(fake_graph.downloads) == 1
    (entry,) = await user_entries(runtime)
    assert len(entry["attachments"]) == 1
    assert len(stored_files(database_url)) == 1

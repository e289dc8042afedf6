"""Photos and PDFs sent to the bot reach the model (issue 38 §4): against the fake Bot API
(getFile and the file download), real Postgres and the offline model, which ends its answer
with what it was shown."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from fake_telegram import FakeTelegram
from telegram_support import FRIEND, until

from toren.host.runtime import Runtime
from toren.testing import pdf_bytes, png_bytes

Agent = Callable[..., Awaitable[Runtime]]


async def user_entries(runtime: Runtime) -> list[dict[str, Any]]:
    (run,) = await runtime.list_runs(agent="bot", kind="session")
    session = await runtime.get_session(run.id)
    return [entry for entry in session["transcript"] if entry["role"] == "user"]


def files_by(database_url: str, uploaded_by: str) -> list[tuple[str, str, int]]:
    with psycopg.connect(database_url) as conn:
        return [(name, content_type, size) for name, content_type, size in conn.execute(
            "SELECT name, content_type, size_bytes FROM toren_control.files "
            "WHERE uploaded_by = %s ORDER BY created_at", (uploaded_by,)).fetchall()]


async def test_a_photo_with_a_caption_reaches_the_model_as_an_attachment(
        fake_telegram: FakeTelegram, telegram_agent: Agent, database_url: str) -> None:
    runtime = await telegram_agent()
    photo = png_bytes(640, 480, (10, 120, 200))
    fake_telegram.photo(10, FRIEND, photo, caption="what is in this picture?",
                        thumbnail=png_bytes(90, 60))
    await until(lambda: fake_telegram.texts(FRIEND))
    (reply,) = fake_telegram.texts(FRIEND)
    assert reply.startswith("You said: what is in this picture?")
    assert reply.endswith(f"I was shown:\n- photo-10.jpg (image/png, 640x480 px): "
                          f"{len(photo):,} bytes received")
    assert len(fake_telegram.downloads) == 1  # the largest size only, not the thumbnail
    (entry,) = await user_entries(runtime)
    (attachment,) = entry["attachments"]
    assert attachment["name"] == "photo-10.jpg" and attachment["width"] == 640
    assert entry["text"].startswith("what is in this picture?\n\nAttached files")
    assert files_by(database_url, f"telegram:{FRIEND}") == [
        ("photo-10.jpg", "image/png", len(photo))]


async def test_a_pdf_sent_as_a_document_without_a_caption_reaches_the_model(
        fake_telegram: FakeTelegram, telegram_agent: Agent) -> None:
    runtime = await telegram_agent()
    pdf = pdf_bytes("Revenue grew 12%.", "Costs fell.")
    fake_telegram.document(20, FRIEND, pdf, file_name="report.pdf",
                           mime_type="application/pdf")
    await until(lambda: fake_telegram.texts(FRIEND))
    (reply,) = fake_telegram.texts(FRIEND)
    assert reply.endswith(f"I was shown:\n- report.pdf (application/pdf): {len(pdf):,} bytes "
                          "received")
    (entry,) = await user_entries(runtime)
    (attachment,) = entry["attachments"]
    assert attachment["content_type"] == "application/pdf" and attachment["pages"] == 2


async def test_files_too_large_or_of_another_type_get_a_reply_and_the_chat_goes_on(
        fake_telegram: FakeTelegram, telegram_agent: Agent, database_url: str) -> None:
    runtime = await telegram_agent(runtime_settings={"max_file_bytes": 1_000_000})
    # a 60 MB photo: Telegram says its size, so it is refused without being downloaded
    fake_telegram.photo(30, FRIEND, png_bytes(4, 4), size=60 * 1024 * 1024,
                        caption="look at this")
    await until(lambda: len(fake_telegram.texts(FRIEND)) == 2)
    refusal, reply = fake_telegram.texts(FRIEND)
    assert refusal == ("Sorry, I could not take photo-30.jpg: it is 62.9 MB, and files here "
                       "may be at most 1.0 MB.")
    # the caption still reaches the agent, which hears that the photo did not
    assert reply.startswith("You said: look at this\n\n(photo-30.jpg was sent too but could "
                            "not be taken: it is 62.9 MB")
    assert "I was shown" not in reply
    assert fake_telegram.downloads == []
    assert not any(method == "getFile" for _at, method, _status in fake_telegram.calls)

    # a PDF whose size Telegram does not say, larger than the limit once downloaded, and a
    # zip: no caption, so there is no turn, only the replies
    big = pdf_bytes("x" * 100) + b"%" * 1_200_000
    fake_telegram.document(31, FRIEND, big, file_name="big.pdf", mime_type="application/pdf",
                           declare_size=False)
    fake_telegram.document(32, FRIEND, b"PK\x05\x06" + b"\0" * 18, file_name="a.zip",
                           mime_type="application/zip")
    await until(lambda: len(fake_telegram.texts(FRIEND)) == 4)
    assert fake_telegram.texts(FRIEND)[2:] == [
        "Sorry, I could not take big.pdf: it is larger than 1.0 MB, the most a file here may "
        "be.",
        "Sorry, I could not take a.zip: I can take photos, images (PNG, JPEG, GIF, WebP) and "
        "PDFs, and this is application/zip."]

    fake_telegram.message(33, FRIEND, "still there?")
    await until(lambda: len(fake_telegram.texts(FRIEND)) == 5)
    await asyncio.sleep(0.5)
    assert fake_telegram.texts(FRIEND)[4] == "You said: still there?"
    entries = await user_entries(runtime)  # one session, two turns
    assert [entry["text"].split("\n")[0] for entry in entries] == [
        "look at this", "still there?"]
    assert files_by(database_url, f"telegram:{FRIEND}") == []  # nothing was stored


async def test_a_photo_over_telegrams_20_mb_download_limit_is_refused_with_a_reply(
        fake_telegram: FakeTelegram, telegram_agent: Agent) -> None:
    await telegram_agent()  # Toren takes 50 MB; Telegram lets a bot download 20 MB
    fake_telegram.photo(35, FRIEND, png_bytes(4, 4), size=25 * 1024 * 1024)
    await until(lambda: fake_telegram.texts(FRIEND))
    await asyncio.sleep(0.5)
    assert fake_telegram.texts(FRIEND) == [
        "Sorry, I could not take photo-35.jpg: it is larger than the 20 MB Telegram lets a "
        "bot download."]


async def test_a_failed_download_is_retried_then_the_person_is_told(
        fake_telegram: FakeTelegram, telegram_agent: Agent) -> None:
    await telegram_agent()
    photo = png_bytes(32, 32)
    fake_telegram.fail("download", 500)
    fake_telegram.fail("getFile", 502)
    fake_telegram.photo(40, FRIEND, photo, caption="first")
    await until(lambda: fake_telegram.texts(FRIEND), within=30)
    (reply,) = fake_telegram.texts(FRIEND)
    assert reply.endswith(f"photo-40.jpg (image/png, 32x32 px): {len(photo):,} bytes received")

    # failing every time: after a few tries with backoff, the person is told, and the
    # caption goes through; the chat's next message is answered as ever
    fake_telegram.fail("download", 500, times=20)
    fake_telegram.photo(41, FRIEND, photo, caption="second")
    fake_telegram.message(42, FRIEND, "third")
    await until(lambda: len(fake_telegram.texts(FRIEND)) == 4, within=40)
    _first, refusal, second, third = fake_telegram.texts(FRIEND)
    assert refusal == ("Sorry, I could not take photo-41.jpg: it could not be downloaded. "
                       "Please send it again.")
    assert second.startswith("You said: second\n\n(photo-41.jpg was sent too")
    assert third == "You said: third"  # in order, after the photo's turn
    tries = [status for _at, method, status in fake_telegram.calls if method == "download"]
    assert tries.count(500) == 1 + 4  # the first photo's one failure, the second's four


async def test_a_duplicated_photo_update_is_downloaded_and_answered_once(
        fake_telegram: FakeTelegram, telegram_agent: Agent, database_url: str) -> None:
    update = fake_telegram.photo(50, FRIEND, png_bytes(8, 8), caption="once")
    fake_telegram.add_update(update)  # delivered twice in one batch
    runtime = await telegram_agent()
    await until(lambda: fake_telegram.texts(FRIEND))
    fake_telegram.add_update(update)  # and again after it was answered
    await asyncio.sleep(1.5)
    assert len(fake_telegram.texts(FRIEND)) == 1
    assert len(fake_telegram.downloads) == 1
    (entry,) = await user_entries(runtime)
    assert len(entry["attachments"]) == 1
    assert len(files_by(database_url, f"telegram:{FRIEND}")) == 1

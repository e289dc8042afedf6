"""The console as HTTP: the page at ``/`` for a browser (JSON for anyone else), its assets,
strict CSP, public without a key (it holds no data), hostile asset names; and queue depth in
``/healthz`` for the fleet page."""

from __future__ import annotations

import re
from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer

from toren.server.app import create_app
from toren.server.console import CSP, page_names
from toren.testing import write_agent_dir

BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"


async def test_a_browser_gets_the_console_and_anyone_else_json(make_runtime,
                                                               tmp_path: Path) -> None:
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "chat")])
    async with TestClient(TestServer(create_app(runtime, require_keys=True))) as client:
        page = await client.get("/", headers={"Accept": BROWSER_ACCEPT})
        html = await page.text()
        assert page.status == 200 and page.content_type == "text/html"
        assert page.headers["Content-Security-Policy"] == CSP
        assert "script-src 'self'" in CSP and "unsafe-inline" not in CSP
        assert page.headers["X-Content-Type-Options"] == "nosniff"
        # no inline script: every <script> loads a file of this origin
        scripts = re.findall(r"<script([^>]*)>(.*?)</script>", html, re.S)
        assert scripts and all(body == "" and 'src="/console/' in attrs
                               for attrs, body in scripts)
        assert "style=" not in html and "<style" not in html
        for name in page_names():
            assert f'src="/console/{name}"' in html
        # every asset the page names is served without a key (keys are required here)
        for src in re.findall(r'(?:src|href)="(/console/[^"]+)"', html):
            asset = await client.get(src)
            assert asset.status == 200, src
            assert asset.headers["Content-Security-Policy"] == CSP
        for accept in ("application/json", "*/*", ""):
            answer = await client.get("/", headers={"Accept": accept} if accept else {})
            body = await answer.json()
            assert answer.status == 200 and body["console"] == "/" and body["api"]
        # the API itself still needs the key the console asks for
        assert (await client.get("/runs")).status == 401


async def test_hostile_asset_names_get_404(make_runtime, tmp_path: Path) -> None:
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "chat")])
    async with TestClient(TestServer(create_app(runtime, require_keys=False))) as client:
        for name in ("../app.py", "..%2Fapp.py", "pages/../../auth.py", "index.html",
                     "console.js.map", "pages/nothing.js", "CONSOLE.JS", "%00.js",
                     "pages/", "a" * 5000 + ".js", "console.js/", ".js", "FAVICON.SVG",
                     "favicon.svg/", "pages/favicon.svg", "nothing.svg"):
            response = await client.get(f"/console/{name}")
            assert response.status == 404, name
            assert (await response.json())["error"]["code"] == "not_found"
        assert (await client.get("/console/console.js")).content_type == "text/javascript"
        assert (await client.get("/console/console.css")).content_type == "text/css"
        icon = await client.get("/console/favicon.svg")
        assert icon.content_type == "image/svg+xml" and b"<svg" in await icon.read()


async def test_the_console_scripts_set_text_never_html() -> None:
    # escaping by construction: no script writes markup from a string
    assets = Path(__file__).parents[2] / "toren" / "server" / "console_assets"
    for script in assets.rglob("*.js"):
        source = script.read_text()
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write",
                     "eval(", "new Function"):
            assert sink not in source, f"{script.name} uses {sink}"
        assert "?key=" not in source and "api_key=" not in source  # never in a URL


async def test_healthz_shows_queue_depth_per_agent_to_trusted_callers(make_runtime,
                                                                      tmp_path: Path) -> None:
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "chat")], workers=False)
    await runtime.start_run("chat", "one")
    await runtime.start_run("chat", "two")
    async with TestClient(TestServer(create_app(runtime, require_keys=False))) as client:
        health = await (await client.get("/healthz")).json()
    assert health["queue"] == {"chat": {"ready": 2, "in_flight": 0, "delayed": 0,
                                         "waiting_concurrency": 0}}

"""The console: a web page at ``/`` over the public HTTP API, and its static assets.

The page and its scripts ship in the wheel (``console_assets/``: no Node toolchain, no build
step). The page is the only HTML the server renders; everything it shows it fetches from the
API with the user's key, so it cannot see more than any client can. Strict CSP: scripts only
from this origin, no inline script or style. A page is one file in ``console_assets/pages/``
(it registers itself with ``Toren.page``); the server lists them in the page it renders.
"""

from __future__ import annotations

import html
import re
from functools import cache
from importlib import resources
from string import Template

from aiohttp import web

import toren
from toren.server.errors import json_error

#: Where assets are served from (public, like ``/``: they hold no data).
ASSET_PREFIX = "/console/"
#: What an asset may be called: a script, a stylesheet or an SVG image (the favicon), at the
#: top or in ``pages/``.
_ASSET_NAME = re.compile(r"^(?:pages/)?[a-z0-9][a-z0-9_-]*\.(?:js|css|svg)$")
_TYPES = {"js": "text/javascript", "css": "text/css", "svg": "image/svg+xml"}
#: Scripts and styles from this origin only; requests only to this origin; no framing. Images
#: also from ``blob:``: a file's content is fetched with the API key and shown from one.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
       "img-src 'self' blob:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
SECURITY_HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
                    "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY",
                    "Cache-Control": "no-cache"}


def routes(app: web.Application) -> None:
    app.router.add_get("/console/{asset:.+}", asset)


def wants_html(request: web.Request) -> bool:
    """Whether the client asked for a page (a browser) rather than JSON."""
    accept = request.headers.get("Accept", "")
    return "text/html" in accept and "application/json" not in accept.split(",")[0]


def _assets() -> resources.abc.Traversable:
    return resources.files("toren.server").joinpath("console_assets")


@cache
def page_names() -> tuple[str, ...]:
    """The page modules (``pages/*.js``), in name order."""
    pages = _assets().joinpath("pages")
    return tuple(sorted(f"pages/{item.name}" for item in pages.iterdir()
                        if _ASSET_NAME.match(f"pages/{item.name}")))


@cache
def _index_html() -> str:
    template = Template(_assets().joinpath("index.html").read_text("utf-8"))
    scripts = "\n".join(f'<script src="{ASSET_PREFIX}{html.escape(name)}" defer></script>'
                        for name in page_names())
    return template.substitute(pages=scripts, version=html.escape(toren.__version__))


def console_page() -> web.Response:
    """The console's HTML (the same for everyone: it holds no data)."""
    return web.Response(text=_index_html(), content_type="text/html",
                        headers=SECURITY_HEADERS)


@cache
def known_assets() -> frozenset[str]:
    """Every asset there is: scripts and stylesheets at the top and in ``pages/``."""
    top = _assets()
    names = [item.name for item in top.iterdir()] + list(page_names())
    return frozenset(name for name in names if _ASSET_NAME.match(name))


@cache
def asset_bytes(name: str) -> bytes:
    """An asset's content, read once (they are small; no disk read on the event loop after)."""
    return _assets().joinpath(name).read_bytes()


async def asset(request: web.Request) -> web.Response:
    """A script, stylesheet or image of the console; 404 for any other name (only names of
    files shipped with the console are looked up: nothing from the request reaches the
    disk)."""
    name = request.match_info["asset"]
    if name not in known_assets():
        return json_error(404, "not_found", "no such console asset")
    return web.Response(body=asset_bytes(name), content_type=_TYPES[name.rsplit(".", 1)[1]],
                        charset="utf-8", headers=SECURITY_HEADERS)

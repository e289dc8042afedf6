"""Which models take images and PDFs through Chat Completions, and what an image costs them.

Chat Completions has no way to ask a model or a server what it can see, so the rule is by
model name, the same on every endpoint: a name of the GPT-4o, GPT-4.1, GPT-4.5 or GPT-5
families or of the o1, o3 and o4 reasoning models takes PNG, JPEG, GIF and WebP images and
PDFs, except the text-only ones (``o1-mini``, ``o1-preview``, ``o3-mini``, and the audio,
realtime, search, transcription and speech variants). Every other name (``gpt-3.5-turbo``,
``gpt-4``, a local server's ``llama3.1`` or ``llava``) takes none: the kernel gives it a note
naming the files instead. A proxy's ``vendor/model`` name is judged by its last part, so
``openai/gpt-4o`` on a gateway sees images.

OpenAI bills an image by its size (https://platform.openai.com/docs/guides/images-vision,
"Calculating costs"), in one of two ways, for ``detail: high`` (the most ``auto``, which Toren
leaves the API to pick, can cost):

- tiles: the image is scaled down to fit 2048 x 2048, then down so its shortest side is at
  most 768 px; each 512 px tile costs ``tile`` tokens, plus ``base`` tokens once. 85 + 170 a
  tile for GPT-4o, GPT-4.1, GPT-4.5 and any model not listed below; GPT-4o mini bills 2,833 +
  5,667 a tile (33 times as many tokens at a 33rd of the price: the same dollars); o1 and o3
  75 + 150; GPT-5 70 + 140.
- patches: the mini and nano models of GPT-4.1 and GPT-5 and o4-mini count 32 px patches, at
  most 1,536 (a larger image is scaled down to fit), times a multiplier: 1.62 for the minis,
  2.46 for the nanos, 1.72 for o4-mini.

A PDF costs what the kernel's default estimates (about 1,600 tokens a page: its text and an
image of each page). These are estimates for receipts, budgets and compaction: providers
report no separate image count.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from toren.plugin import IMAGE_TYPES, PDF_TYPE
from toren_openai.prices import table_name

#: What a model that can see takes: PNG, JPEG, GIF (not animated) and WebP images, and PDFs.
VISION_TYPES = IMAGE_TYPES | {PDF_TYPE}
#: The families that take images and PDFs (a name starting so, not followed by a digit:
#: ``o3-pro`` and ``gpt-5.4-mini`` are in, ``o30`` would not be).
_VISION_FAMILY = re.compile(r"^(gpt-4o|gpt-4\.1|gpt-4\.5|gpt-5|o1|o3|o4)(?![0-9])")
#: Models of those families that take text only.
_TEXT_ONLY = re.compile(r"^(o1-mini|o1-preview|o3-mini)(?![0-9a-z])"
                        r"|audio|realtime|search|transcribe|tts")


def vision_name(model_name: str) -> str:
    """The name the rule reads: lower case, a proxy's ``vendor/`` prefix left out."""
    return model_name.strip().lower().rpartition("/")[2]


def input_types_for(model_name: str) -> frozenset[str]:
    """The attachment types ``model_name`` (without ``openai/``) takes (see the module)."""
    name = vision_name(model_name)
    if _VISION_FAMILY.match(name) and not _TEXT_ONLY.search(name):
        return VISION_TYPES
    return frozenset()


@dataclass(frozen=True)
class Tiles:
    """Billed per 512 px tile of the image scaled for ``detail: high``."""

    base: int
    tile: int


@dataclass(frozen=True)
class Patches:
    """Billed per 32 px patch (at most ``MAX_PATCHES``), times ``multiplier``."""

    multiplier: float


#: GPT-4o, GPT-4.1, GPT-4.5, and any model not in ``IMAGE_COSTS``.
DEFAULT_COST = Tiles(85, 170)
#: By model name (a dated snapshot is its model, as in the price table).
IMAGE_COSTS: dict[str, Tiles | Patches] = {
    "gpt-4o-mini": Tiles(2833, 5667),
    "gpt-5": Tiles(70, 140),
    "gpt-5-chat-latest": Tiles(70, 140),
    "o1": Tiles(75, 150),
    "o1-pro": Tiles(75, 150),
    "o3": Tiles(75, 150),
    "gpt-4.1-mini": Patches(1.62),
    "gpt-4.1-nano": Patches(2.46),
    "gpt-5-mini": Patches(1.62),
    "gpt-5-nano": Patches(2.46),
    "o4-mini": Patches(1.72),
}
TILE_PX = 512
MAX_EDGE_PX = 2048
SHORT_SIDE_PX = 768
PATCH_PX = 32
MAX_PATCHES = 1536
#: Slack for sizes that land on a tile's or a patch's edge after scaling in floating point.
_EPSILON = 1e-9


def image_cost(model_name: str) -> Tiles | Patches:
    """How ``model_name`` bills an image."""
    name = table_name(vision_name(model_name), IMAGE_COSTS)
    return IMAGE_COSTS[name] if name is not None else DEFAULT_COST


def image_tokens(model_name: str, width: int | None, height: int | None) -> int:
    """The input tokens an image of ``width`` x ``height`` costs ``model_name`` at high
    detail; an image whose size is unknown is counted at the most an image can cost it."""
    cost = image_cost(model_name)
    if isinstance(cost, Patches):
        patches = MAX_PATCHES if not width or not height else patch_count(width, height)
        return max(1, round(patches * cost.multiplier))
    if not width or not height:  # 768 x 2048: 2 x 4 tiles, the most there can be
        return cost.base + cost.tile * 8
    return cost.base + cost.tile * tile_count(width, height)


def tile_count(width: int, height: int) -> int:
    """512 px tiles of an image scaled to fit 2048 x 2048, then to a shortest side of at most
    768 px (a smaller image is not enlarged)."""
    w, h = float(width), float(height)
    if max(w, h) > MAX_EDGE_PX:
        scale = MAX_EDGE_PX / max(w, h)
        w, h = w * scale, h * scale
    if min(w, h) > SHORT_SIDE_PX:
        scale = SHORT_SIDE_PX / min(w, h)
        w, h = w * scale, h * scale
    return _cells(w, TILE_PX) * _cells(h, TILE_PX)


def patch_count(width: int, height: int) -> int:
    """32 px patches of an image, scaled down (to whole patches across its narrower fit)
    when it would take more than 1,536."""
    patches = _cells(width, PATCH_PX) * _cells(height, PATCH_PX)
    if patches <= MAX_PATCHES:
        return patches
    scale = math.sqrt(PATCH_PX * PATCH_PX * MAX_PATCHES / (width * height))
    across, down = width * scale / PATCH_PX, height * scale / PATCH_PX
    scale *= min(max(1, math.floor(across)) / across, max(1, math.floor(down)) / down)
    patches = _cells(width * scale, PATCH_PX) * _cells(height * scale, PATCH_PX)
    return min(patches, MAX_PATCHES)


def _cells(length: float, size: int) -> int:
    return max(1, math.ceil(length / size - _EPSILON))

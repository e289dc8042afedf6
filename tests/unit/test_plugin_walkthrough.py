"""docs/reference/plugins.md "Write a channel plugin" quotes the template plugin
(contrib/plugin-template): each of its Python and TOML blocks must appear, whole lines and
verbatim, in the template's files, so the walkthrough and the code it teaches cannot drift
apart; its agent.yaml must load with the plugin."""

from __future__ import annotations

import re
from pathlib import Path

import toren
from toren.plugin import Settings
from toren.testing import write_agent_dir

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "reference" / "plugins.md"
TEMPLATE = ROOT / "contrib" / "plugin-template"
HEADING = "\n## Write a channel plugin\n"


def section() -> str:
    """The walkthrough: from its heading to the next second-level heading."""
    text = DOC.read_text(encoding="utf-8")
    assert HEADING in text, f"{DOC} has no section {HEADING.strip()!r}"
    start = text.index(HEADING)
    end = text.find("\n## ", start + len(HEADING))
    return text[start:] if end == -1 else text[start:end]


def blocks(language: str) -> list[str]:
    """The section's fenced code blocks in ``language``, each ending with a newline."""
    return re.findall(rf"^```{language}\n(.*?)^```$", section(), re.MULTILINE | re.DOTALL)


def quoted_in(block: str, files: list[Path]) -> bool:
    """Whether ``block`` is a run of whole lines of one of ``files``."""
    return any(f"\n{block}" in f"\n{path.read_text(encoding='utf-8')}\n" for path in files)


def drifted(language: str, files: list[Path]) -> list[str]:
    return [block.splitlines()[0] for block in blocks(language) if not quoted_in(block, files)]


def test_every_python_block_is_the_templates_code() -> None:
    sources = sorted(path for path in TEMPLATE.rglob("*.py") if "__pycache__" not in path.parts)
    # the channel class, its settings, each method it implements, the hooks and the tests
    assert len(blocks("python")) >= 10
    assert drifted("python", sources) == [], (
        "these blocks of 'Write a channel plugin' (first lines shown) are not in "
        f"{TEMPLATE.relative_to(ROOT)}: quote the code as it is, or change both")


def test_every_toml_block_is_the_templates_pyproject() -> None:
    assert len(blocks("toml")) >= 2  # the pinned dependency and the entry point
    assert drifted("toml", [TEMPLATE / "pyproject.toml"]) == []


def test_the_walkthroughs_agent_yaml_loads_with_the_template_plugin(tmp_path: Path) -> None:
    (agent_yaml,) = blocks("yaml")
    directory = write_agent_dir(tmp_path, "bot", agent_yaml=agent_yaml)
    runtime = toren.Runtime([directory], settings=Settings(home=tmp_path,
                                                           load_plugins=("toren-hello",)))
    assert runtime.channel_agents("parley") == {"bot": {
        "url": "http://127.0.0.1:8765", "token_env": "PARLEY_TOKEN", "allow_from": ["ada"]}}


def test_the_channel_stays_small_enough_to_read_in_one_sitting() -> None:
    # the walkthrough promises a whole platform in about 130 lines: ChatChannel does the rest
    lines = (TEMPLATE / "src" / "toren_hello" / "parley.py").read_text().splitlines()
    assert len(lines) <= 150

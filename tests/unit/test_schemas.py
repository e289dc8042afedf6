"""The agent.yaml JSON Schema is a valid contract, and the bundled example satisfies it."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import yaml

from toren.agents import Limits, load_agent
from toren.schemas import load_schema
from toren.testing import write_agent_dir

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "contrib" / "examples" / "research-crew"


def test_agent_schema_is_valid_draft_2020_12() -> None:
    schema = load_schema("agent.schema.json")

    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator.check_schema({**schema["$defs"]["subagent"],
                                                  "$defs": schema["$defs"]})


def test_repository_schemas_directory_is_the_shipped_one() -> None:
    on_disk = json.loads((ROOT / "schemas" / "agent.schema.json").read_text())

    assert on_disk == load_schema("agent.schema.json")


def test_every_property_is_documented() -> None:
    schema = load_schema("agent.schema.json")

    def undocumented(node: dict, where: str) -> list[str]:
        missing = []
        for name, prop in node.get("properties", {}).items():
            if "description" not in prop and "$ref" not in prop and name != "description":
                missing.append(f"{where}.{name}")
        return missing

    found = undocumented(schema, "agent")
    for name, definition in schema["$defs"].items():
        found += undocumented(definition, name)
    assert found == []


def test_example_agent_yaml_validates() -> None:
    data = yaml.safe_load((EXAMPLE / "agent.yaml").read_text())

    jsonschema.Draft202012Validator(load_schema("agent.schema.json")).validate(data)


def test_example_crew_loads() -> None:
    agent = load_agent(EXAMPLE)

    assert agent.name == "research-crew"
    assert agent.model == "toren/scripted"
    assert agent.limits == Limits(max_steps=12, max_tool_output_bytes=8192)
    assert list(agent.tools) == ["lookup_topic", "word_count"]
    assert all(tool.idempotent for tool in agent.tools.values())
    assert agent.tools["lookup_topic"].parameters["properties"]["topic"]["description"]
    assert agent.tools["lookup_topic"].function("postgres").startswith("PostgreSQL")
    assert sorted(agent.subagents) == ["researcher", "writer"]
    researcher = agent.subagents["researcher"]
    assert list(researcher.tools) == ["lookup_topic"]
    assert researcher.limits == Limits(max_steps=4, max_tool_output_bytes=8192)
    assert list(agent.subagents["writer"].tools) == ["word_count"]


def test_write_agent_dir_makes_a_loadable_agent(tmp_path: Path) -> None:
    directory = write_agent_dir(tmp_path, "made", description="d", limits={"maxSteps": 3})

    data = yaml.safe_load((directory / "agent.yaml").read_text())
    jsonschema.Draft202012Validator(load_schema("agent.schema.json")).validate(data)
    assert load_agent(directory).limits.max_steps == 3


def test_the_openapi_document_lists_exactly_the_routes_the_server_has() -> None:
    import types

    from toren.config import Settings
    from toren.seams.plugins import PluginHost
    from toren.server.app import create_app

    # the document describes /mcp too, which the toren-mcp plugin adds (register_routes)
    runtime = types.SimpleNamespace(keys=types.SimpleNamespace(verify=None),
                                    runs=types.SimpleNamespace(reader=None),
                                    settings=Settings(), live=None,
                                    plugins=PluginHost(["toren-mcp"]),
                                    listed_channels=lambda: [])  # no chat channel listed
    app = create_app(runtime, require_keys=False)  # type: ignore[arg-type]
    served = {f"{route.method} {route.resource.canonical}" for route in app.router.routes()
              if route.method != "HEAD" and route.resource is not None}
    openapi = load_schema("openapi.json")
    documented = {f"{method.upper()} {path}" for path, item in openapi["paths"].items()
                  for method in item if method != "parameters"}
    assert served == documented

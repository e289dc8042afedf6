"""Agent loading: agent directories (agent.yaml, prompt.md, tools.py, workflow.py,
subagents/*.md) read and validated into ``AgentSpec`` values (``toren.agents.loader``)."""

from toren.agents.loader import (
    AGENT_FILE,
    DEFAULT_IMPORT_TIMEOUT_S,
    MAX_PROMPT_BYTES,
    AgentSpec,
    ModelCheck,
    SubagentSpec,
    check_agent_name,
    check_env,
    discover_agent_dirs,
    import_timeout,
    load_agent,
    load_agents,
    load_subagents,
    load_tools_file,
    load_workflow_file,
    missing_env,
    read_definition,
    schema_name_for,
)
from toren.core.limits import Compaction, Limits

__all__ = [
    "AGENT_FILE", "DEFAULT_IMPORT_TIMEOUT_S", "MAX_PROMPT_BYTES", "AgentSpec", "Compaction",
    "Limits", "ModelCheck", "SubagentSpec", "check_agent_name", "check_env",
    "discover_agent_dirs", "import_timeout", "load_agent", "load_agents", "load_subagents",
    "load_tools_file", "load_workflow_file", "missing_env", "read_definition", "schema_name_for",
]

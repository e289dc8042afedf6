"""Execution: the agentic task loop, workflows, the orchestrator and compaction steps.

It works one queue message at a time through the ports it is handed
(``toren.execution.ports.ExecutionPorts``) and never imports the host or a surface.
"""

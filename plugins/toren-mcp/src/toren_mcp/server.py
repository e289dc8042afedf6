"""``build_server``: the MCP tools and resources over the HTTP API (``toren.client``)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from pydantic import Field

import toren
from toren.plugin import TorenClient, TorenError, TorenUnreachable, check_id

#: The longest one ``wait_for_run`` call waits (MCP clients time tool calls out near a minute
#: or more); call it again to keep waiting: the run goes on either way.
MAX_WAIT_S = 300.0
#: How often ``wait_for_run`` looks at the run (and reports progress).
POLL_S = 0.5
_TERMINAL = frozenset({"completed", "failed", "cancelled"})

#: Builds the HTTP client a request's tools use: ``toren mcp`` uses ``TOREN_URL`` and
#: ``TOREN_API_KEY``; ``/mcp`` on the server forwards the caller's own key.
ClientFactory = Callable[[Context], AbstractAsyncContextManager[TorenClient]]

#: The ids Toren hands out (runs, sessions, approvals) are UUIDs. The schema says so twice:
#: ``format`` (which not every MCP client checks) and ``pattern``; the SDK checks the pattern
#: before a tool runs, and ``toren.client`` checks every id again before sending it.
UUID_PATTERN = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
Uuid = Annotated[str, Field(pattern=UUID_PATTERN, json_schema_extra={"format": "uuid"})]
RunId = Annotated[Uuid, Field(description="The run's id, a UUID such as "
                                          "3f1c2d4e-5a6b-4c7d-8e9f-0a1b2c3d4e5f, as start_run "
                                          "returned it.")]
SessionId = Annotated[Uuid, Field(description="The session's id (a UUID), as session_start "
                                              "returned it.")]
ApprovalId = Annotated[Uuid, Field(description="The approval's id (a UUID), from "
                                               "approvals_list.")]
QuestionId = Annotated[Uuid, Field(description="The question's id (a UUID), from "
                                               "questions_list or get_run's "
                                               "pending_questions.")]
Reason = Annotated[str | None, Field(description="Why (recorded, and shown to the model on "
                                                 "deny).", max_length=2000)]
Digest = Annotated[str, Field(pattern="^[0-9a-f]{64}$", description=(
    "The approval's digest as approvals_list showed it (sha256 of its arguments): the "
    "decision is refused (approval_stale) if the arguments are not those any more."))]


#: Sent with every API call a tool makes: the audit trail records the call's source as
#: ``mcp`` (docs/guides/auth.md, "Audit trail").
MCP_HEADERS = {"X-Toren-Source": "mcp", "User-Agent": f"toren-mcp/{toren.__version__}"}


@asynccontextmanager
async def env_client(_: Context) -> AsyncIterator[TorenClient]:
    """The client ``toren mcp`` uses: ``TOREN_URL`` and ``TOREN_API_KEY`` from the
    environment (default ``http://127.0.0.1:8420``, the local ``toren dev``)."""
    async with TorenClient(headers=MCP_HEADERS) as client:
        yield client


def _tool_error(exc: Exception) -> ToolError:
    if isinstance(exc, TorenUnreachable):
        return ToolError(exc.message)
    if isinstance(exc, TorenError):  # an API error, or an id the client refused to send
        return ToolError(f"{exc.code}: {exc.message}")
    return ToolError(str(exc))


def build_server(client_for: ClientFactory = env_client) -> MCPServer:
    """The Toren MCP server. Called once by ``toren mcp`` and once per HTTP app (``/mcp``).

    Every tool and resource opens a client with ``client_for(ctx)`` and does one or a few
    HTTP API calls; API errors come back as tool errors naming the code and what to do.
    """
    server: MCPServer = MCPServer(
        name="toren", version=toren.__version__,
        instructions="Toren runs agents durably: start_run returns at once with a run id; the run "
                     "goes on whatever happens to this connection. Use wait_for_run (bounded; "
                     "call again to keep waiting) or get_run to see how it ended.")

    @asynccontextmanager
    async def api(ctx: Context) -> AsyncIterator[TorenClient]:
        try:
            async with client_for(ctx) as client:
                yield client
        except TorenError as exc:
            raise _tool_error(exc) from exc

    @server.tool()
    async def list_agents(ctx: Context) -> dict[str, Any]:
        """The agents served here: name, description, model, tools."""
        async with api(ctx) as client:
            return {"agents": await client.agents()}

    @server.tool()
    async def start_run(
            agent: Annotated[str, Field(description="The agent's name (see list_agents).",
                                        min_length=1, max_length=200)],
            input: Annotated[Any, Field(description="The run's input: text or any JSON.")],
            ctx: Context,
            idempotency_key: Annotated[str | None, Field(
                description="Same key, same run: retrying never starts a second run.",
                min_length=1, max_length=255)] = None,
            webhook: Annotated[str | None, Field(
                description="An http(s) URL told when the run ends: a signed JSON POST with "
                            "its status, output and totals (docs/guides/webhooks.md).",
                min_length=1, max_length=2048)] = None,
            priority: Annotated[int | None, Field(
                description="The run's priority, -100..100 (default: the agent's, else 0): "
                            "higher is claimed first (docs/guides/flow-control.md).",
                ge=-100, le=100)] = None) -> dict[str, Any]:
        """Start a durable run and return its id at once (it keeps running if this client
        disconnects). Then wait_for_run or get_run, or give a webhook to be told."""
        async with api(ctx) as client:
            return dict(await client.create_run(agent, input, idempotency_key=idempotency_key,
                                                webhook=webhook, priority=priority))

    @server.tool()
    async def fleet(ctx: Context) -> dict[str, Any]:
        """The fleet at a glance (GET /fleet; the key needs fleet:read): live workers and their
        lanes, each agent's queue with what waits and why (a worker, a concurrency slot, a
        delay), agents no live worker serves, provider rate-limit buckets (what each window
        holds, calls waiting, 429 pauses), runs in flight and recent failures."""
        async with api(ctx) as client:
            return await client.fleet()

    @server.tool()
    async def get_run(run_id: RunId, ctx: Context) -> dict[str, Any]:
        """A run's status, output, why it stopped, cost totals and pending approvals."""
        async with api(ctx) as client:
            return dict(await client.get_run(run_id))

    @server.tool()
    async def wait_for_run(
            run_id: RunId, ctx: Context,
            timeout_s: Annotated[float, Field(
                description=f"Wait at most this long (0 to {MAX_WAIT_S:.0f} seconds).",
                ge=0, le=MAX_WAIT_S)] = 60.0) -> dict[str, Any]:
        """Wait until the run ends or ``timeout_s`` passes, reporting progress meanwhile;
        returns the run (as get_run) and ``finished``. Not finished: call again."""
        started = time.monotonic()
        async with api(ctx) as client:
            while True:
                run = dict(await client.get_run(run_id))
                elapsed = time.monotonic() - started
                if run["status"] in _TERMINAL or elapsed >= timeout_s:
                    return run | {"finished": run["status"] in _TERMINAL}
                await ctx.report_progress(round(elapsed, 1), timeout_s,
                                          f"run {run_id} is {run['status']}")
                await asyncio.sleep(min(POLL_S, max(0.0, timeout_s - elapsed)))

    @server.tool()
    async def list_runs(
            ctx: Context,
            agent: Annotated[str | None, Field(description="Only this agent's runs.",
                                               max_length=200)] = None,
            status: Annotated[str | None, Field(description="Only runs in this status.",
                                                max_length=40)] = None,
            limit: Annotated[int, Field(ge=1, le=200)] = 20,
            cursor: Annotated[str | None, Field(description="next_cursor of the last page.",
                                                max_length=500)] = None) -> dict[str, Any]:
        """Runs, newest first, a page at a time."""
        async with api(ctx) as client:
            return dict(await client.list_runs(agent=agent, status=status, limit=limit,
                                               cursor=cursor))

    @server.tool()
    async def cancel_run(run_id: RunId, ctx: Context, reason: Reason = None) -> dict[str, Any]:
        """Cancel a run (its tasks stop at their next step)."""
        async with api(ctx) as client:
            return dict(await client.cancel_run(run_id, reason or "cancelled over MCP"))

    @server.tool()
    async def send_signal(
            run_id: RunId,
            name: Annotated[str, Field(
                description="The signal's name, as the run's workflow waits for it "
                            "(ctx.wait_for_signal): lowercase letters, digits, - and _.",
                pattern="^[a-z][a-z0-9_-]{0,63}$")],
            ctx: Context,
            payload: Annotated[Any, Field(description="The signal's data: any JSON "
                                                      "(at most 64 KiB).")] = None,
            idempotency_key: Annotated[str | None, Field(
                description="Same key, same signal: retrying never sends it twice.",
                min_length=1, max_length=255)] = None) -> dict[str, Any]:
        """Send a signal to a run: a workflow waiting for it (ctx.wait_for_signal) goes on
        (one sent before it waits is kept for it), and so does a tool waiting for it
        (toren.wait_for_signal). A finished run refuses it (run_finished)."""
        async with api(ctx) as client:
            return dict(await client.signal(run_id, name, payload,
                                            idempotency_key=idempotency_key))

    @server.tool()
    async def get_receipt(run_id: RunId, ctx: Context) -> dict[str, Any]:
        """What a run did and cost, as `toren jobs receipt --json` prints it: why it stopped,
        every task's model calls (model, tokens, cost, latency) and tool calls, totals, budget."""
        async with api(ctx) as client:
            return dict(await client.receipt(run_id))

    @server.tool()
    async def session_start(
            agent: Annotated[str, Field(min_length=1, max_length=200)], ctx: Context,
            idempotency_key: Annotated[str | None, Field(min_length=1, max_length=255)] = None,
    ) -> dict[str, Any]:
        """Open a conversation with an agent; then session_send."""
        async with api(ctx) as client:
            return dict(await client.create_session(agent, idempotency_key=idempotency_key))

    @server.tool()
    async def session_send(
            session_id: SessionId,
            text: Annotated[str, Field(min_length=1)], ctx: Context,
            wait_s: Annotated[float, Field(description="Wait this long for the reply "
                                                       "(0: return at once).",
                                           ge=0, le=MAX_WAIT_S)] = 60.0) -> dict[str, Any]:
        """Send a message and wait (bounded) for the agent's reply; returns the session
        (status, transcript)."""
        async with api(ctx) as client:
            await client.send_message(session_id, text)
            if wait_s <= 0:
                return dict(await client.get_session(session_id))
            try:
                return dict(await client.wait_for_turn(session_id, poll_s=POLL_S,
                                                       timeout_s=wait_s))
            except TimeoutError:
                return dict(await client.get_session(session_id))

    @server.tool()
    async def session_get(session_id: SessionId, ctx: Context) -> dict[str, Any]:
        """A session's status and transcript."""
        async with api(ctx) as client:
            return dict(await client.get_session(session_id))

    @server.tool()
    async def approvals_list(
            ctx: Context,
            status: Annotated[str | None, Field(max_length=40)] = "pending",
            agent: Annotated[str | None, Field(max_length=200)] = None,
            run_id: Annotated[Uuid | None, Field(description="Only this run's.")] = None,
            limit: Annotated[int, Field(ge=1, le=200)] = 50) -> dict[str, Any]:
        """Tool calls waiting for a person's decision (or, with ``status``, decided ones)."""
        async with api(ctx) as client:
            return {"approvals": await client.list_approvals(agent=agent, run_id=run_id,
                                                             status=status, limit=limit)}

    @server.tool()
    async def approve(approval_id: ApprovalId, ctx: Context, reason: Reason = None,
                      digest: Digest | None = None,
                      always: Annotated[bool, Field(
                          description="Also approve, without asking, every later call of this "
                                      "tool with the same arguments in this run.")] = False
                      ) -> dict[str, Any]:
        """Let a waiting tool call run (exactly once; ``always``: and the same call again
        for the rest of the run). Send the ``digest`` approvals_list showed."""
        async with api(ctx) as client:
            return dict(await client.approve(approval_id, reason, digest=digest,
                                             always=always))

    @server.tool()
    async def deny(approval_id: ApprovalId, ctx: Context, reason: Reason = None,
                   digest: Digest | None = None) -> dict[str, Any]:
        """Refuse a waiting tool call; the model reads the refusal and the reason."""
        async with api(ctx) as client:
            return dict(await client.deny(approval_id, reason, digest=digest))

    @server.tool()
    async def edit_approval(approval_id: ApprovalId, ctx: Context,
                            arguments: Annotated[dict[str, Any], Field(
                                description="The arguments the call runs with instead (checked "
                                            "against the tool's schema).")],
                            digest: Digest, reason: Reason = None) -> dict[str, Any]:
        """Let a waiting tool call run with other arguments; the agent's model is told which
        changed. ``digest``: the one approvals_list showed for the arguments you edited."""
        async with api(ctx) as client:
            return dict(await client.edit_approval(approval_id, arguments, digest=digest,
                                                   reason=reason))

    @server.tool()
    async def answer_approval(approval_id: ApprovalId, ctx: Context,
                              answer: Annotated[str, Field(
                                  min_length=1, max_length=100_000,
                                  description="The tool's result, as the agent's model will "
                                              "read it; the tool does not run.")],
                              digest: Digest, reason: Reason = None) -> dict[str, Any]:
        """Answer a waiting tool call in the tool's stead: the tool never runs."""
        async with api(ctx) as client:
            return dict(await client.answer_approval(approval_id, answer, digest=digest,
                                                     reason=reason))

    @server.tool()
    async def questions_list(run_id: RunId, ctx: Context,
                             status: Annotated[str | None, Field(max_length=40)] = "pending"
                             ) -> dict[str, Any]:
        """The questions a run's agent asked a person (ask_user) and waits on (or, with
        ``status``, settled ones)."""
        async with api(ctx) as client:
            return {"questions": await client.list_questions(run_id, status=status)}

    @server.tool()
    async def answer_question(
            run_id: RunId, question_id: QuestionId, ctx: Context,
            answer: Annotated[str, Field(min_length=1, max_length=8000, description=(
                "The answer; for a question with choices, one of them or its number."))]
    ) -> dict[str, Any]:
        """Answer a question a run's agent asked (exactly once: the first answer wins); the
        answer becomes its ask_user call's result and the run goes on."""
        async with api(ctx) as client:
            return dict(await client.answer_question(run_id, question_id, answer))

    @server.resource("toren://runs/{run_id}/receipt", mime_type="application/json")
    async def receipt_resource(run_id: str, ctx: Context) -> str:
        """A run's receipt (as get_receipt)."""
        try:
            run_id = check_id("run_id", run_id)
            async with client_for(ctx) as client:
                return json.dumps(await client.receipt(run_id))
        except TorenError as exc:
            raise ResourceError(str(_tool_error(exc))) from exc

    @server.resource("toren://sessions/{session_id}/transcript", mime_type="application/json")
    async def transcript_resource(session_id: str, ctx: Context) -> str:
        """A session's transcript."""
        try:
            session_id = check_id("session_id", session_id)
            async with client_for(ctx) as client:
                return json.dumps(await client.get_session(session_id))
        except TorenError as exc:
            raise ResourceError(str(_tool_error(exc))) from exc

    return server


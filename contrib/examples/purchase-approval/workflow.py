"""A workflow that waits for a person: price the purchase, wait for an "approval" signal, order.

Re-executed from the top on every tick of the run: everything already done returns from the
run's log. ctx.wait_for_signal waits (holding no worker, through restarts) until a signal named
"approval" is sent to the run, or one sent earlier is there; what it took, or that it timed out,
is recorded, so every re-execution sees the same. See docs/guides/signals.md.
"""

from toren.errors import SignalTimeout

#: How long a request waits for its approval before it expires.
APPROVAL_TIMEOUT_S = 24 * 3600


async def workflow(ctx):
    quote = await ctx.task("estimator", ctx.input)
    if not quote.ok:
        return {"status": "failed", "reason": quote.error}
    ctx.log("waiting for approval", quote=quote.output)
    try:
        decision = await ctx.wait_for_signal("approval", timeout=APPROVAL_TIMEOUT_S)
    except SignalTimeout:
        return {"status": "expired", "quote": quote.output}
    if not isinstance(decision, dict) or not decision.get("approved"):
        reason = decision.get("reason") if isinstance(decision, dict) else None
        return {"status": "rejected", "reason": reason, "quote": quote.output}
    order = await ctx.task("purchaser", ctx.input)
    return {"status": "ordered", "approved_by": decision.get("by"), "order": order.output}

"""The planner pattern: one wave's output plans the next.

Re-executed from the top on every tick of the run: everything already done returns from the
run's log, so this code must be deterministic (use ctx.now() and ctx.uuid(), never the clock or
random numbers directly). See docs/guides/workflows-and-waves.md.

The planner declares an output schema (subagents/planner.md, schemas/plan.json): its answer is
validated JSON, and ctx.task returns it as an object. Nothing here parses text.
"""


async def workflow(ctx):
    ctx.log("planning", question=ctx.input)
    plan = await ctx.task("planner", ctx.input)
    if not plan.ok:
        return f"Planning failed: {plan.error['message'] if plan.error else plan.status}"
    topics = plan.output["topics"]  # a list of strings: the schema says so
    ctx.log("researching", topics=topics)
    results = await ctx.wave([("researcher", topic) for topic in topics])
    notes = [f"{topic}: {result.output}" for topic, result in zip(topics, results, strict=True)
             if result.ok]
    missing = [topic for topic, result in zip(topics, results, strict=True)
               if not result.ok]
    if missing:
        ctx.log("some research failed", topics=missing)
    draft = await ctx.task("writer", f"Question: {ctx.input}\n\nNotes:\n" + "\n".join(notes))
    return draft.output

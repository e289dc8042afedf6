"""The planner pattern: one wave's output plans the next.

Re-executed from the top on every tick of the run: everything already done returns from the
run's log, so this code must be deterministic (use ctx.now() and ctx.uuid(), never the clock or
random numbers directly). See docs/guides/workflows-and-waves.md.
"""


def parse_topics(plan: str) -> list[str]:
    """The planner's topics: comma-separated (the offline model quotes the tool's answer)."""
    text = plan.split("suggest_topics:", 1)[-1]
    return [topic.strip(" -.\n") for topic in text.split(",") if topic.strip(" -.\n")]


async def workflow(ctx):
    ctx.log("planning", question=ctx.input)
    plan = await ctx.task("planner", ctx.input)
    if not plan.ok:
        return f"Planning failed: {plan.error['message'] if plan.error else plan.status}"
    topics = parse_topics(plan.output or "")
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

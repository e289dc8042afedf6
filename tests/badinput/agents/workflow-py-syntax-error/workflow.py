async def workflow(ctx):
    await ctx.task(

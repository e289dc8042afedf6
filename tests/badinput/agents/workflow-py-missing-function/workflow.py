async def flow(ctx):
    return None



def workflow(ctx):
    return None

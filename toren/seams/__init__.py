"""The seams: what plugins and drivers implement and how they are found.

Hookspecs (pluggy, many-of-N: models, tools, channels, commands), plugin loading, the driver
interfaces (stevedore, one-of-N: store, queue, worker runtime) and the shapes they exchange.
Every other layer may import from here; nothing here imports execution, the host or a surface.
"""

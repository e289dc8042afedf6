"""The host: the ``Runtime`` API that embeds Toren, the worker (poll loop, heartbeat,
guardians) and the in-process worker-runtime driver."""

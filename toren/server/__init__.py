"""The aiohttp HTTP API served by ``toren dev`` and ``toren serve``."""

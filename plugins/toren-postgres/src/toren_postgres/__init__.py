"""Postgres drivers for Toren: the state store and queue, plus the embedded server."""

__version__ = "0.1.0"

"""Toren: a self-hosted durable agent runtime on a Postgres event log."""

from toren.hookspecs import hookimpl
from toren.tools import tool

__version__ = "0.1.0"

__all__ = ["__version__", "hookimpl", "tool"]

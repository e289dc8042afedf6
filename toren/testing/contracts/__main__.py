"""``python -m toren.testing.contracts``: each driver interface's abstract methods and which of
them the contract suites call."""

from __future__ import annotations

from toren.testing.contracts.coverage import table

print(table())

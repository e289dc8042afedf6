"""An API key as the store keeps it (``ApiKey``): a value the key store's interface returns.

Making, hashing and checking keys is ``toren.keys``'; roles and scopes are
``toren.core.scopes``'.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from toren.core.scopes import DEFAULT_ROLE, role_scopes


@dataclass(frozen=True)
class ApiKey:
    """A stored API key: everything but the secret (which is never stored) and its hash.

    ``role``: ``admin``, ``operator``, ``viewer``, ``approver`` or ``custom`` (then
    ``scopes`` lists what it may do; a named role's scopes come from ``toren.core.scopes``).
    ``agents``: the only agents it may touch (``None``: every agent). ``expires_at``: when it
    stops working (``None``: never).
    """

    id: str
    name: str
    prefix: str
    created_at: datetime
    last_used_at: datetime | None = None
    revoked_at: datetime | None = None
    role: str = DEFAULT_ROLE
    scopes: tuple[str, ...] = ()
    agents: tuple[str, ...] | None = None
    expires_at: datetime | None = None

    @property
    def expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= datetime.now(UTC)

    @property
    def active(self) -> bool:
        """Neither revoked nor expired."""
        return self.revoked_at is None and not self.expired

    @property
    def granted(self) -> frozenset[str]:
        """The scopes it holds: its role's, or its own for ``custom``."""
        return role_scopes(self.role, self.scopes)

    def may_touch(self, agent: str) -> bool:
        """Whether it may see or change ``agent``'s runs, sessions, approvals, schedules."""
        return self.agents is None or agent in self.agents

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "name": self.name, "prefix": self.prefix,
            "created_at": self.created_at.isoformat(),
            "last_used_at": self.last_used_at.isoformat() if self.last_used_at else None,
            "revoked_at": self.revoked_at.isoformat() if self.revoked_at else None,
            "role": self.role, "scopes": sorted(self.granted),
            "agents": list(self.agents) if self.agents is not None else None,
            "expires_at": self.expires_at.isoformat() if self.expires_at else None,
        }

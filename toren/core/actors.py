"""Who did something (``Actor``), and whether agent.yaml's approvers name them.

Approvers are named by what cannot be forged by picking a name: ``key:<id or prefix>`` (one
API key), ``role:<role>`` (any key of that role), ``cli:<user>`` (the local CLI as that user)
and ``<channel>:<user id>`` (a chat user pressing a button, e.g. ``telegram:123``). A key's
free-text name never matches: two keys could share a look-alike name.
"""

from __future__ import annotations

import getpass
import os
import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from toren.core.errors import ConfigError
from toren.core.scopes import ROLE_NAMES

if TYPE_CHECKING:
    from toren.core.keys import ApiKey

ActorKind = Literal["key", "cli", "anonymous", "channel", "system"]
#: The environment variable naming the local CLI's user (default: the OS user).
ACTOR_ENV = "TOREN_ACTOR"
_REFERENCE = re.compile(r"([a-z][a-z0-9_-]{0,31}):(\S.{0,199})", re.DOTALL)
_MAX_USER = 100


@dataclass(frozen=True)
class Actor:
    """Who made a call: ``kind`` (``key``, ``cli``, ``anonymous`` for keyless local
    development, ``channel`` for a chat user, ``system``), ``id`` (the key's id, the CLI user,
    ``<channel>:<user id>``), ``name`` (to show: the key's name). A key's ``role`` and
    ``prefix`` let approvers name it by role or prefix."""

    kind: ActorKind
    id: str
    name: str
    role: str | None = None
    prefix: str | None = field(default=None, compare=False)

    @classmethod
    def of_key(cls, key: ApiKey) -> Actor:
        """The actor of a request that an API key authenticated."""
        return cls("key", key.id, key.name, role=key.role, prefix=key.prefix)

    @property
    def label(self) -> str:
        """How records show it (``decided_by``): ``name (key <id>)`` for a key, else the
        reference approvers use (``cli:alice``, ``telegram:123``, ``anonymous``)."""
        if self.kind == "key":
            return f"{self.name} (key {self.id})"
        return self.id

    def to_json(self) -> dict[str, str | None]:
        return {"kind": self.kind, "id": self.id, "name": self.name, "role": self.role}


#: Who calls the HTTP API when keys are not required (keyless ``toren dev``).
ANONYMOUS = Actor("anonymous", "anonymous", "anonymous")
#: Toren itself (an expiry, a schedule).
SYSTEM = Actor("system", "system", "toren")


def cli_actor(env: Mapping[str, str] | None = None) -> Actor:
    """The local CLI's actor: ``cli:$TOREN_ACTOR``, else ``cli:<os user>``.

    ``ConfigError`` if ``TOREN_ACTOR`` is set but empty, too long or not printable.
    """
    env = os.environ if env is None else env
    user = env.get(ACTOR_ENV)
    if user is None:
        user = getpass.getuser()
    else:
        user = user.strip()
        if not user or len(user) > _MAX_USER or any(_unprintable(c) or c.isspace()
                                                    for c in user):
            raise ConfigError(f"{ACTOR_ENV} must be a user name (1-{_MAX_USER} printable "
                              "characters, no spaces); unset it to use the OS user")
    return Actor("cli", f"cli:{user}", f"cli:{user}")


def actor_of_label(label: str) -> Actor:
    """The actor a ``decided_by`` string from a surface that has no richer one stands for:
    ``cli:<user>``, ``<channel>:<user id>``, ``anonymous`` or ``system``."""
    if label.startswith("cli:"):
        return Actor("cli", label, label)
    if label == ANONYMOUS.id:
        return ANONYMOUS
    if _REFERENCE.fullmatch(label):
        return Actor("channel", label, label)
    return Actor("system", label, label)


def check_approver(reference: str) -> str:
    """An approver reference as agent.yaml may write it; ``ValueError`` saying the forms.

    ``key:<id or prefix>``, ``role:<role>``, ``cli:<user>`` or ``<channel>:<user id>``.
    """
    text = reference.strip() if isinstance(reference, str) else ""
    match = _REFERENCE.fullmatch(text)
    if match is None:
        raise ValueError(
            f"approver {reference!r} is not a reference: name a key as key:<id or prefix> "
            "(toren keys list), a role as role:<role>, the CLI as cli:<user>, or a chat user "
            "as <channel>:<user id>; a key's name alone is not accepted (names can be "
            "look-alikes)")
    kind, rest = match[1], match[2]
    if kind == "role" and rest not in ROLE_NAMES:
        raise ValueError(f"approver {reference!r}: role:<role> names one of "
                         f"{', '.join(ROLE_NAMES)}")
    return text


def may_decide(approvers: Iterable[str], actor: Actor) -> bool:
    """Whether ``actor`` may decide an approval waiting for ``approvers`` (empty: anyone
    who may decide approvals)."""
    references = list(approvers)
    return not references or any(approver_matches(ref, actor) for ref in references)


def approver_matches(reference: str, actor: Actor) -> bool:
    """Whether one approver reference names ``actor``: ``key:`` by the key's id or prefix,
    ``role:`` by the key's role, anything else by the CLI user's or chat user's id."""
    kind, _, rest = reference.partition(":")
    if actor.kind == "key":
        if kind == "key":
            return rest.lower() in (actor.id.lower(), *_prefixes(actor.prefix))
        return kind == "role" and actor.role == rest
    if actor.kind in ("cli", "channel") and kind not in ("key", "role"):
        return reference == actor.id
    return False


def _prefixes(prefix: str | None) -> tuple[str, ...]:
    if not prefix:
        return ()
    return (prefix.lower(), prefix.lower().removeprefix("toren_"))


def _unprintable(char: str) -> bool:
    category = unicodedata.category(char)
    return category.startswith("C") or (category.startswith("Z") and char != " ")


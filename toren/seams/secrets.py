"""Settings and agent env from a secret store, resolved into the process environment once at
startup (``toren`` does it before reading any setting) and again on SIGHUP.

Two ways to ask, both naming a source by its scheme (an entry point in the ``toren.secrets``
group; toren-fargate registers ``aws-sm``, AWS Secrets Manager):

- ``TOREN_SECRETS=<scheme>:<id>[,<scheme>:<id>...]``: each a JSON object of ``NAME`` -> value;
  every ``NAME`` not set in the environment is set from it (a variable set explicitly wins).
  A bare ``arn:aws:secretsmanager:...`` means ``aws-sm:<arn>``.
- ``VAR=<scheme>:<id>[#<key>]``: the variable's value is the secret (``#key``: that key of
  a JSON secret).

Values are never logged or put in an error message: errors name the variable and the secret.
"""

from __future__ import annotations

import abc
import json
import logging
import re
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass

from stevedore import DriverManager
from stevedore.exception import NoMatches

from toren.errors import ConfigError
from toren.seams.plugin_api import check_extension_api

log = logging.getLogger(__name__)

NAMESPACE = "toren.secrets"
#: ``scheme:rest`` where scheme is lower case, as in ``aws-sm:arn:aws:secretsmanager:...``
_REFERENCE = re.compile(r"^([a-z][a-z0-9-]{1,30}):(.+)$", re.DOTALL)
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: The scheme a bare Secrets Manager ARN in TOREN_SECRETS means.
ARN_SCHEME = "aws-sm"


class SecretSource(abc.ABC):
    """A secret store (``toren.secrets`` entry point, named by its scheme).

    Made once per resolution with no arguments (its settings come from the environment);
    ``fetch`` is called with every id used with its scheme, and is synchronous: ``toren``
    resolves before its event loop starts, and on SIGHUP in a thread.
    """

    @abc.abstractmethod
    def fetch(self, secret_ids: list[str]) -> dict[str, str]:
        """The text of each secret, by id. Raises ``ConfigError`` naming the secret (never
        its value) when one cannot be read."""


@dataclass(frozen=True)
class Reference:
    """``VAR=<scheme>:<id>[#<key>]`` (``variable`` is ``None`` for a ``TOREN_SECRETS``
    entry, whose secret is a JSON object of variables)."""

    variable: str | None
    scheme: str
    secret_id: str
    key: str | None = None


#: The environment as the process started (secret references unresolved), for refreshes.
STARTUP_ENVIRONMENT: dict[str, str] = {}


def resolve_at_startup(env: MutableMapping[str, str]) -> list[str]:
    """Resolve ``env``'s references (``toren`` calls it before reading any setting) and keep
    them for ``refresh``."""
    STARTUP_ENVIRONMENT.clear()
    STARTUP_ENVIRONMENT.update(env)
    return resolve_environment(env, STARTUP_ENVIRONMENT)


def has_startup_references() -> bool:
    """Whether the process started with secret references (else SIGHUP keeps its default)."""
    return bool(find_references(STARTUP_ENVIRONMENT, installed_schemes()))


def refresh(env: MutableMapping[str, str]) -> list[str]:
    """Read the secrets of the startup references again into ``env`` (SIGHUP)."""
    return resolve_environment(env, STARTUP_ENVIRONMENT or None)


def installed_schemes() -> set[str]:
    import importlib.metadata as metadata

    return {ep.name for ep in metadata.entry_points(group=NAMESPACE)}


def find_references(env: Mapping[str, str], schemes: set[str]) -> list[Reference]:
    """The secret references in ``env``: ``TOREN_SECRETS`` entries and variables whose value
    starts with an installed scheme."""
    found: list[Reference] = []
    for item in (env.get("TOREN_SECRETS") or "").split(","):
        item = item.strip()
        if not item:
            continue
        if item.startswith("arn:aws:secretsmanager:"):
            item = f"{ARN_SCHEME}:{item}"
        match = _REFERENCE.match(item)
        if match is None or "#" in match.group(2):
            raise ConfigError(f"TOREN_SECRETS entry {item!r} is not <scheme>:<secret id> "
                              "(e.g. aws-sm:arn:aws:secretsmanager:...); a #key picks from "
                              "one secret: use VAR=aws-sm:<id>#key for that")
        found.append(Reference(None, match.group(1), match.group(2)))
    for name, value in env.items():
        if name == "TOREN_SECRETS":
            continue
        match = _REFERENCE.match(value)
        if match is None or match.group(1) not in schemes:
            continue
        secret_id, _, key = match.group(2).partition("#")
        found.append(Reference(name, match.group(1), secret_id, key or None))
    return found


def _source(scheme: str, schemes: set[str]) -> SecretSource:
    try:
        manager: DriverManager[SecretSource] = DriverManager(NAMESPACE, scheme,
                                                             invoke_on_load=True)
    except NoMatches as exc:
        hint = " (pip install toren-fargate)" if scheme == ARN_SCHEME else ""
        raise ConfigError(f"no secret source named {scheme!r} is installed{hint}; installed: "
                          f"{', '.join(sorted(schemes)) or 'none'}") from exc
    source = manager.driver
    check_extension_api(manager.extensions[0], f"secret source {scheme}",
                        f"stop using {scheme}: references")
    if not isinstance(source, SecretSource):
        raise ConfigError(f"the secret source {scheme!r} is not a SecretSource")
    return source


def resolve_environment(env: MutableMapping[str, str],
                        original: Mapping[str, str] | None = None) -> list[str]:
    """Replace secret references in ``env`` by their values; return the names set (never
    the values). ``original`` is the environment as first given (with the references), for a
    refresh: pass what the first call saw, so a refresh reads the same secrets again."""
    given = dict(env if original is None else original)
    schemes = installed_schemes()
    references = find_references(given, schemes)
    if not references:
        return []
    by_scheme: dict[str, set[str]] = {}
    for ref in references:
        by_scheme.setdefault(ref.scheme, set()).add(ref.secret_id)
    texts: dict[tuple[str, str], str] = {}
    for scheme, ids in by_scheme.items():
        fetched = _source(scheme, schemes).fetch(sorted(ids))
        texts.update({(scheme, secret_id): text for secret_id, text in fetched.items()})
    resolved: dict[str, str] = {}
    for ref in references:  # per-variable references
        if ref.variable is None:
            continue
        text = texts[(ref.scheme, ref.secret_id)]
        resolved[ref.variable] = (text if ref.key is None else
                                  _key_of(text, ref.key, f"{ref.variable}'s secret "
                                                         f"{ref.secret_id}"))
    for ref in references:  # bundles fill what is not set explicitly
        if ref.variable is not None:
            continue
        for name, value in _bundle(texts[(ref.scheme, ref.secret_id)], ref.secret_id).items():
            if name not in given and name not in resolved:
                resolved[name] = value
    env.update(resolved)
    log.info("set %d variable(s) from secrets: %s", len(resolved), ", ".join(sorted(resolved)))
    return sorted(resolved)


def _json_object(text: str, what: str) -> dict[str, object]:
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise ConfigError(f"{what} is not a JSON object (its value is not shown)")
    return data


def _key_of(text: str, key: str, what: str) -> str:
    data = _json_object(text, what)
    if key not in data:
        raise ConfigError(f"{what} has no key {key!r}; its keys: {', '.join(sorted(data))}")
    value = data[key]
    return value if isinstance(value, str) else json.dumps(value)


def _bundle(text: str, secret_id: str) -> dict[str, str]:
    data = _json_object(text, f"the TOREN_SECRETS secret {secret_id}")
    bad = [name for name in data if not _NAME.match(name)]
    if bad:
        raise ConfigError(f"the TOREN_SECRETS secret {secret_id} has keys that are not "
                          f"variable names: {', '.join(sorted(bad))}")
    return {name: value if isinstance(value, str) else json.dumps(value)
            for name, value in data.items()}

"""The host API for pairing: the people waiting to talk to an agent, and the operator's word."""

from __future__ import annotations

from toren.errors import ConfigError, PairingNotFound
from toren.host.chat.access import CODE_LENGTH, normalize_code
from toren.seams.store.channels import PAIRING_STATUSES, ChannelChats, ChannelPairing


async def list_pairings(store: ChannelChats, status: str | None = "pending"
                        ) -> list[ChannelPairing]:
    """Pairings of every chat channel and agent, newest first (``status=None``: all)."""
    if status is not None and status not in PAIRING_STATUSES:
        raise ConfigError(f"unknown pairing status {status!r}; one of "
                          f"{', '.join(PAIRING_STATUSES)}")
    return await store.list_pairings(status)


async def decide_pairing(store: ChannelChats, code: str, outcome: str,
                         decided_by: str) -> tuple[ChannelPairing, bool]:
    """Approve or deny the pairing with ``code`` (any case, dashes and spaces ignored);
    return it and whether this call decided it (``False``: it was decided before, and keeps
    that decision). ``PairingNotFound`` for an unknown code."""
    if outcome not in ("approved", "denied"):
        raise ConfigError(f"a pairing is approved or denied, not {outcome!r}")
    normalized = normalize_code(code)
    if len(normalized) != CODE_LENGTH:
        raise PairingNotFound(f"{code!r} is not a pairing code: codes are {CODE_LENGTH} "
                              "letters and digits (see `toren channels pair list`)")
    record = await store.decide_pairing(normalized, outcome, decided_by)
    if record is None:
        raise PairingNotFound(f"no pairing has the code {normalized} (see `toren channels "
                              "pair list`)")
    return record, record.status == outcome and record.decided_by == decided_by

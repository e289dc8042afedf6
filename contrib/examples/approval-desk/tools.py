"""Tools of the refunds desk: an order book in memory and a refund ledger in a file, so the
example needs no network. ``issue_refund`` needs a person's approval (agent.yaml)."""

import os
import tempfile
from pathlib import Path

from toren import current_tool_call, tool

ORDERS = {"a7": 40, "b12": 15, "c3": 120}


@tool(idempotent=True)
def look_up_order(order_id: str) -> str:
    """Look an order up: what was paid for it.

    Args:
        order_id: The order's id, e.g. A7.
    """
    paid = ORDERS.get(order_id.strip().lower())
    if paid is None:
        return f"No order {order_id!r}; known orders: {', '.join(sorted(ORDERS))}."
    return f"Order {order_id} was paid {paid} EUR."


def issue_refund(order_id: str, amount_eur: int) -> str:
    """Refund an order. Irreversible: it waits for a person's approval.

    Args:
        order_id: The order to refund.
        amount_eur: How much, in euros.
    """
    # REFUNDS_LEDGER: where refunds are written (default: toren-approval-desk/refunds.log in
    # the system's temporary directory, so trying the example leaves nothing where it was
    # run). The idempotency key is what a real payment API would deduplicate on.
    ledger = Path(os.environ.get("REFUNDS_LEDGER")
                  or Path(tempfile.gettempdir()) / "toren-approval-desk" / "refunds.log")
    ledger.parent.mkdir(parents=True, exist_ok=True)
    with ledger.open("a", encoding="utf-8") as handle:
        handle.write(f"{current_tool_call().idempotency_key} {order_id} {amount_eur}\n")
    return f"Refunded {amount_eur} EUR on order {order_id}."

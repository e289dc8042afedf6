"""Tools of the purchase-approval crew: an offline price list and an order book (no network)."""

from toren import current_tool_call, tool

PRICES = {"laptop": 1400, "monitor": 320, "chair": 450, "desk": 600}


@tool(idempotent=True)
def quote_price(item: str) -> dict[str, object]:
    """The price of an item, in euros, from the offline price list.

    Args:
        item: What to buy, e.g. "laptop".
    """
    name = item.strip().lower()
    return {"item": name, "price_eur": PRICES.get(name, 100)}


@tool(idempotent=True)
def place_order(item: str) -> str:
    """Place the order for an item (once: the call's idempotency key is the order's number).

    Args:
        item: What to order.
    """
    return f"order {current_tool_call().idempotency_key[:12]} placed for {item.strip()}"

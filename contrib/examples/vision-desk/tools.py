"""Tools of the vision desk: exact arithmetic over the figures the model read off a file
(models read numbers well and add them up less well)."""

from decimal import Decimal

from toren import tool


@tool(idempotent=True)
def add_up(amounts: list[float]) -> str:
    """Add amounts exactly: a receipt's line items, a chart's bars.

    Args:
        amounts: The amounts as read off the file, e.g. [7.0, 3.2].
    """
    total = sum((Decimal(str(amount)) for amount in amounts), Decimal(0))
    return f"{len(amounts)} amount(s) add up to {total}"

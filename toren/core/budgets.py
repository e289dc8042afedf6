"""Hard budgets (pure parts): the worst-case price of a model call before it is made, and
whether a reservation of it fits a run's and an agent's day's budget.

The task loop prices every call with ``worst_case_cost`` and asks the store's budget ledger
(``toren.seams.store.budgets``) to reserve it; the ledger, holding a lock, sums what the run and
the agent's UTC day have spent or hold and calls ``decide_reservation``. A reservation that does
not fit is refused and the call is not made; one that fits is settled at the call's actual cost
afterwards. No I/O and no clocks here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

from toren.core.attachments import Attachment
from toren.core.messages import ModelRequest
from toren.core.pricing import Pricing

#: The most one image can take of any provider's input (see ``worst_case_attachment_tokens``).
WORST_IMAGE_TOKENS = 6_000
#: Share of a budget at which a ``BudgetWarning`` is recorded (once per run, once per day).
WARN_SHARE = 0.8

BudgetScope = Literal["run", "daily"]


def worst_case_input_tokens(request: ModelRequest) -> int:
    """An upper bound of the request's input tokens: its UTF-8 size in bytes.

    Byte-level tokenizers (those of Anthropic and OpenAI) never make more tokens than bytes,
    so this holds whatever the text is (English, code, CJK, digits); the provider's own count is
    only known after the call, and a hard budget must decide before it.
    """
    size = len(request.system.encode("utf-8"))
    for message in request.messages:
        size += len(message.text.encode("utf-8")) + 8  # role and framing
        size += sum(worst_case_attachment_tokens(a) for a in message.attachments)
        for call in message.tool_calls:
            size += len(call.name) + len(json.dumps(call.arguments).encode("utf-8")) + 8
    for tool in request.tools:
        size += len(tool.name) + len(tool.description.encode("utf-8"))
        size += len(json.dumps(tool.parameters).encode("utf-8"))
    return size


def worst_case_attachment_tokens(attachment: Attachment) -> int:
    """An upper bound of the tokens an attachment takes: providers scale images down to a
    bounded size (the dearest formula, gpt-4o-mini's, stays under 6,000 an image); a PDF's
    pages are an image each plus their text, which has no more tokens than bytes."""
    if attachment.kind == "pdf":
        pages = attachment.pages or max(1, attachment.size_bytes // 1_000)
        return attachment.size_bytes + WORST_IMAGE_TOKENS * pages
    return WORST_IMAGE_TOKENS


def worst_case_cost(request: ModelRequest, pricing: Pricing) -> float:
    """The most the call can cost: every input byte a token at the dearest input price (cache
    writes may cost more than plain input), plus ``max_tokens`` of output."""
    input_price = max(pricing.input_per_mtok, pricing.cache_write_per_mtok or 0.0,
                      pricing.cache_read_per_mtok or 0.0)
    total = (worst_case_input_tokens(request) * input_price
             + request.max_tokens * pricing.output_per_mtok)
    return round(total / 1_000_000, 10)


@dataclass(frozen=True)
class BudgetRequest:
    """A reservation asked for by the task loop, for one model call.

    ``stream`` and ``epoch`` name the task's lease: the reservation lives as long as that lease
    does, so a worker killed between reserving and settling leaves none held for ever.
    """

    run_id: str
    stream: str
    epoch: int
    step: int
    purpose: Literal["step", "compaction"]
    model: str
    amount_usd: float
    run_budget_usd: float | None
    daily_budget_usd: float | None


@dataclass(frozen=True)
class BudgetSpend:
    """What a budget scope has committed: settled spend plus reservations still held (and
    expired ones, charged at their worst case)."""

    scope: BudgetScope
    spent_usd: float
    budget_usd: float

    def to_json(self) -> dict[str, object]:
        return {"scope": self.scope, "spent_usd": round(self.spent_usd, 10),
                "budget_usd": self.budget_usd,
                "remaining_usd": round(max(0.0, self.budget_usd - self.spent_usd), 10)}


@dataclass(frozen=True)
class BudgetDecision:
    """The ledger's answer: a reservation id, or the scope that refused it.

    ``warnings`` are the scopes this reservation took past ``WARN_SHARE`` of their budget for
    the first time (the ledger remembers which run and which day it warned about).
    ``spend`` is each budgeted scope as it stands after the reservation (or without it when
    refused).
    """

    reservation_id: int | None
    refused_by: BudgetScope | None = None
    spend: tuple[BudgetSpend, ...] = ()
    warnings: tuple[BudgetScope, ...] = ()

    @property
    def granted(self) -> bool:
        return self.refused_by is None


def decide_reservation(amount_usd: float, committed: dict[BudgetScope, tuple[float, float]]
                       ) -> tuple[BudgetScope | None, tuple[BudgetScope, ...]]:
    """Whether ``amount_usd`` fits every budgeted scope.

    Args:
        amount_usd: the worst-case cost to reserve.
        committed: scope -> (committed so far, budget), for the scopes that have a budget.

    Returns:
        The first scope it does not fit (``None`` if it fits all), and the scopes it leaves at
        or past ``WARN_SHARE`` of their budget when granted (the ledger warns about each run and
        each day once).
    """
    for scope, (spent, budget) in committed.items():
        if spent + amount_usd > budget + 1e-12:
            return scope, ()
    warnings = tuple(scope for scope, (spent, budget) in committed.items()
                     if spent + amount_usd >= WARN_SHARE * budget)
    return None, warnings

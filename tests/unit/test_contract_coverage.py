"""The driver contract suites (``toren.testing.contracts``) call every abstract method of the
interfaces they cover, and no test of one contract class hides another's."""

from __future__ import annotations

from toren.testing.contracts import QueueContract, StoreContract
from toren.testing.contracts.coverage import NOT_YET, coverage


def test_the_contracts_call_every_abstract_method_of_what_they_cover() -> None:
    for item in coverage():
        if item.interface not in NOT_YET:
            assert item.missing == (), f"{item.interface.__name__}: {item.missing}"


def test_no_contract_test_hides_another_of_the_same_name() -> None:
    for union in (StoreContract, QueueContract):
        owner: dict[str, type] = {}
        for cls in union.__mro__:
            for name in vars(cls):
                if name.startswith("test_"):
                    assert name not in owner, f"{name}: {owner.get(name)} and {cls}"
                    owner[name] = cls

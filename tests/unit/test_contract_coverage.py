"""The driver contract suites (``toren.testing.contracts``) call every abstract method of every
driver interface, and no test of one contract class hides another's."""

from __future__ import annotations

from toren.seams.archive import ArchiveBackend
from toren.seams.queue import Queue
from toren.seams.store import Store
from toren.testing.contracts import ArchiveContract, QueueContract, StoreContract
from toren.testing.contracts.coverage import INTERFACES, NOT_YET, coverage


def test_the_contracts_call_every_abstract_method_of_what_they_cover() -> None:
    for item in coverage():
        if item.interface not in NOT_YET:
            assert item.missing == (), f"{item.interface.__name__}: {item.missing}"


def test_every_driver_interface_is_covered() -> None:
    """A new interface of ``Store`` (or a driver namespace's base) joins the table, and
    none is left out as "not yet"."""
    assert set(INTERFACES) == {*Store.__bases__, Queue, ArchiveBackend}
    assert not NOT_YET


def test_no_contract_test_hides_another_of_the_same_name() -> None:
    for union in (StoreContract, QueueContract, ArchiveContract):
        owner: dict[str, type] = {}
        for cls in union.__mro__:
            for name in vars(cls):
                if name.startswith("test_"):
                    assert name not in owner, f"{name}: {owner.get(name)} and {cls}"
                    owner[name] = cls

"""The accountants and their registry (docs/accounting.md §12).

``AccountantName`` is the one list of accountant names (``accounting/choices.py``, below
this package so the accountants and ``accounting.results`` name it without importing the
registry): the CLI choices, the plan schema, the accounting requests and results, the HTTP
enums and the README derive from it, and a test keeps it equal to the registry's keys.
Adding an accountant is one file in this package (a subclass of
:class:`~accounting.accountants.base.Accountant`) plus its name in ``AccountantName`` and
its line in ``ACCOUNTANTS`` below.
"""

from __future__ import annotations

from typing import get_args

from accounting.accountants.base import Accountant
from accounting.accountants.closed_form import ClosedFormAccountant
from accounting.accountants.pld import PldAccountant
from accounting.accountants.prv import PrvAccountant
from accounting.accountants.rdp import RdpAccountant
from accounting.choices import DEFAULT_ACCOUNTANT, AccountantName
from accounting.errors import InvalidInputError

# The registry: one stateless instance per accountant, by its ``name``.
ACCOUNTANTS: dict[AccountantName, Accountant] = {
    accountant.name: accountant
    for accountant in (
        RdpAccountant(),
        PrvAccountant(),
        ClosedFormAccountant(),
        PldAccountant(),
    )
}

ACCOUNTANT_NAMES: tuple[AccountantName, ...] = get_args(AccountantName)
# The two figures every plan and ledger row states beside its figure of record
# (``epsilon_rdp`` and ``epsilon_tight``, docs/ledger.md §3): rdp's and the tight accountant's.
RDP_ACCOUNTANT: AccountantName = "rdp"
TIGHT_ACCOUNTANT: AccountantName = "pld"


def get_accountant(name: object, field: str = "accountant") -> Accountant:
    """The registered accountant called ``name``; ``InvalidInputError`` naming ``field`` otherwise."""
    if not isinstance(name, str) or name not in ACCOUNTANTS:
        raise InvalidInputError(field, f"must be one of {', '.join(ACCOUNTANTS)}, got {name!r}")
    return ACCOUNTANTS[name]  # type: ignore[index]


__all__ = [
    "ACCOUNTANTS",
    "ACCOUNTANT_NAMES",
    "DEFAULT_ACCOUNTANT",
    "RDP_ACCOUNTANT",
    "TIGHT_ACCOUNTANT",
    "Accountant",
    "AccountantName",
    "ClosedFormAccountant",
    "PldAccountant",
    "PrvAccountant",
    "RdpAccountant",
    "get_accountant",
]

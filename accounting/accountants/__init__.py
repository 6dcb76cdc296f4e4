"""The accountants and their registry (docs/accounting.md §12).

``AccountantName`` is the one list of accountant names: the CLI choices, the plan
schema, the accounting requests and results, the HTTP enums and the README derive from
it, and a test keeps it equal to the registry's keys. Adding an accountant is one file
in this package (a subclass of :class:`~accounting.accountants.base.Accountant`) plus its
name in ``AccountantName`` and its line in ``ACCOUNTANTS`` below.

The name list comes first because the accountant modules (and ``accounting.results``)
import it from here while this module is being imported.
"""

from __future__ import annotations

from typing import Literal, get_args

AccountantName = Literal["rdp", "prv", "closed_form", "pld"]

from accounting.accountants.base import Accountant  # noqa: E402
from accounting.accountants.closed_form import ClosedFormAccountant  # noqa: E402
from accounting.accountants.pld import PldAccountant  # noqa: E402
from accounting.accountants.prv import PrvAccountant  # noqa: E402
from accounting.accountants.rdp import RdpAccountant  # noqa: E402
from accounting.errors import InvalidInputError  # noqa: E402

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
DEFAULT_ACCOUNTANT: AccountantName = "rdp"


def get_accountant(name: object, field: str = "accountant") -> Accountant:
    """The registered accountant called ``name``; ``InvalidInputError`` naming ``field`` otherwise."""
    if not isinstance(name, str) or name not in ACCOUNTANTS:
        raise InvalidInputError(field, f"must be one of {', '.join(ACCOUNTANTS)}, got {name!r}")
    return ACCOUNTANTS[name]  # type: ignore[index]


__all__ = [
    "ACCOUNTANTS",
    "ACCOUNTANT_NAMES",
    "DEFAULT_ACCOUNTANT",
    "Accountant",
    "AccountantName",
    "ClosedFormAccountant",
    "PldAccountant",
    "PrvAccountant",
    "RdpAccountant",
    "get_accountant",
]

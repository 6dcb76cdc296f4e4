"""The project's error types.

Every error a user can cause is one of these. They are mapped to HTTP status codes and
CLI exit codes in exactly one place each (``app/errors.py`` for HTTP, ``app/cli.py``
for the command line), so the rest of the code raises them and never formats them.

They live in ``accounting`` because it is the bottom of the dependency graph
(``docs/architecture.md``): every other package may import them.
"""

from __future__ import annotations


class GdpfedError(Exception):
    """Base class of all errors that gdpfed reports to its users."""

    code: str = "gdpfed_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidInputError(GdpfedError, ValueError):
    """An input value is outside its domain (eps <= 0, delta not in (0, 1), NaN, ...).

    ``field`` names the offending input the way the user spelled it (``sampling_rate``,
    ``groups[2].epsilon``) so the one-line message can point at it.
    """

    code = "invalid_input"

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.reason = message


class InfeasibleError(GdpfedError):
    """The inputs are individually valid but no answer meets them all.

    Examples: a noise multiplier above the search cap would be needed, more expected
    clients than the population holds, a pool that cannot reach its secure-aggregation
    minimum.
    """

    code = "infeasible"


class BudgetConflictError(InvalidInputError):
    """A new budget below what a group has already spent (docs/planning.md §9).

    Privacy already spent cannot be taken back, so such a change is refused everywhere
    with this one rule: HTTP 409 (re-plan and population changes alike), CLI exit 2.
    """

    code = "budget_conflict"

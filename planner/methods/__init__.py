"""The planning methods: one module per method, one line per method in ``METHODS``.

Every method is a choice of pools, sampling rates and keep ratios (docs/planning.md §2),
returned as a :class:`~planner.methods.base.Design` that ``planner.finalize`` calibrates
and verifies. To add a method (docs/architecture.md §Registries): write ``planner/methods/NAME.py``
with a ``build(problem) -> Design`` and ``METHOD = PlanningMethod(...)``, add its line
below and its name to ``planner.schema.PlanMethod`` (tests/planner/test_methods.py keeps
the two equal). The command line, the experiment configs and ``finalize`` read this
registry.
"""

from __future__ import annotations

from planner.methods import (
    dp_fedavg,
    dp_fedavg_all,
    gdpfed,
    gdpfed_minus,
    gdpfed_plus,
    idp_sample,
    idp_scale,
    nonprivate,
    pooled_plus,
)
from planner.methods.base import Design, PlanningMethod
from planner.problem import Problem

# In the schema's order: baselines first, then ours (also the comparison table's order).
METHODS: dict[str, PlanningMethod] = {
    method.name: method
    for method in (
        nonprivate.METHOD,
        dp_fedavg.METHOD,
        dp_fedavg_all.METHOD,
        gdpfed.METHOD,
        gdpfed_minus.METHOD,
        gdpfed_plus.METHOD,
        idp_sample.METHOD,
        idp_scale.METHOD,
        pooled_plus.METHOD,
    )
}


def method_problem(problem: Problem, method: str) -> Problem:
    """The problem ``method`` plans and ``finalize`` calibrates: ``problem`` unless the
    method prepares its own (``PlanningMethod.prepare``)."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}")
    prepare = METHODS[method].prepare
    return problem if prepare is None else prepare(problem)


def design(problem: Problem, method: str) -> Design:
    """The design of ``method`` for ``problem`` (docs/planning.md §2); ``problem`` is the
    method's own (``method_problem``)."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}")
    return METHODS[method].build(problem)


__all__ = ["METHODS", "Design", "PlanningMethod", "design", "method_problem"]

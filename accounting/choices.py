"""Lists of choices that several modules and packages name, each spelled once.

- ``AccountantName``: the accountants' names, which the CLI choices, the plan schema, the
  accounting requests and results, the HTTP enums and the README derive from
  (docs/accounting.md §12). It sits below the accountants and their results, so every
  module may name an accountant without importing the registry
  (``accounting/accountants/__init__.py``, which re-exports it and ``ACCOUNTANT_NAMES``
  beside the registry and the default).
- ``SecaggMode`` and ``RequestedSecagg``: a pool's secure-aggregation graph and what a run
  may ask for (docs/secure-aggregation.md). They are the planner's (``planner.schema``
  re-exports them), and sit here, in ``accounting`` only as the bottom layer, because the
  trainer's command line (``trainer/run/options.py``, ``trainer/run/config.py``) offers
  them without loading the planner.
- ``SecaggMechanism``: the noise mechanism a pool's secure aggregation runs, the continuous
  Gaussian (the default, approximate) or the distributed Skellam (exact;
  docs/secure-aggregation.md §Discrete noise). The plan states both (``planner.schema``
  re-exports it) and the trainer's ``--secagg-mechanism`` selects one, so it sits here for
  the same reason.

This module imports nothing of the project.
"""

from __future__ import annotations

from typing import Literal

AccountantName = Literal["rdp", "prv", "closed_form", "pld"]
# The default for calibrating and certifying plans, ledgers, the service and the CLI: the
# tight accountant (issue 26, docs/accounting.md §13). rdp stays available by name and still
# tabulates sigma(q) for the optimisation (pld's ``tabulated_by``). It sits here beside the
# names, re-exported by the registry, so that ``gdpfed account``'s parser offers it without
# importing the accountants (start-up time, docs/architecture.md "Command line").
DEFAULT_ACCOUNTANT: AccountantName = "pld"

# A pool's secure-aggregation graph (PoolPlan.secagg_mode; named so the service's OpenAPI
# document names it, app/openapi.py).
SecaggMode = Literal["full", "sparse"]
# What a run may ask for: a graph, or the plan's own choice per pool (planner.secagg).
RequestedSecagg = Literal[SecaggMode, "auto"]
# The noise a pool's secure aggregation carries (planner.schema.MECHANISM_LABELS says what
# each claims); the first is the trainer's default.
SecaggMechanism = Literal["gaussian_continuous", "skellam"]

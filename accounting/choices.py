"""The accountants' names: the one list the CLI choices, the plan schema, the accounting
requests and results, the HTTP enums and the README derive from (docs/accounting.md §12).

It sits below the accountants and their results, imports nothing, so every module may name
an accountant without importing the registry (``accounting/accountants/__init__.py``,
which re-exports it as ``ACCOUNTANT_NAMES`` beside the registry and the default).
"""

from __future__ import annotations

from typing import Literal

AccountantName = Literal["rdp", "prv", "closed_form", "pld"]

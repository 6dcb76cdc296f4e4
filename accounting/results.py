"""What the accountants answer: an epsilon report, or a calibration (docs/accounting.md §8).

Both are plain pydantic models so the CLI prints them with ``--json`` and the HTTP
service returns them as they are.
"""

from __future__ import annotations

from typing import Literal

import pydantic

from accounting.choices import AccountantName

# What a calibration solved for (named so the service's OpenAPI document names it).
SolvedFor = Literal["noise_multiplier", "sampling_rate", "rounds"]


class EpsilonReport(pydantic.BaseModel):
    """The privacy spent by a history of events at ``delta``.

    ``epsilon`` is the value one may claim: never optimistic. rdp: the RDP bound. prv: the
    PRV upper bound (``lower``/``estimate``/``upper`` are reported too). closed_form: the
    rdp value, with the formula's own epsilon in ``estimate`` (docs/accounting.md §6.3). When prv
    fails, ``fallback`` is true, ``accountant_used`` is "rdp" and ``reason`` says why.
    """

    epsilon: float
    delta: float
    accountant: AccountantName
    accountant_used: AccountantName
    estimate: float | None = None
    lower: float | None = None
    upper: float | None = None
    optimal_order: float | None = None
    fallback: bool = False
    reason: str | None = None


class Calibration(pydantic.BaseModel):
    """The answer to an inverse question (noise multiplier, sampling rate or rounds).

    ``epsilon`` is the epsilon achieved by (spent events + the returned phase), checked
    under ``accountant_used``. ``sound`` says whether the returned values meet
    ``target_epsilon`` there; they do whenever ``rounds`` > 0, with one documented
    exception: ``raw`` closed-form answers that rdp rejects (``sound`` false;
    docs/accounting.md §6.2). ``replaced``: the formula's value missed the target, and the
    answer is the (sound) rdp one instead. ``spent_epsilon`` is the epsilon of the spent
    events alone.
    """

    solved_for: SolvedFor
    sampling_rate: float
    noise_multiplier: float
    rounds: int
    delta: float
    target_epsilon: float
    epsilon: float
    accountant: AccountantName
    accountant_used: AccountantName
    sound: bool = True
    replaced: bool = False
    fallback: bool = False
    reason: str | None = None
    spent_epsilon: float | None = None

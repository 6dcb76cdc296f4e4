"""PRV accounting (Gopi, Lee, Wutschitz 2021) through ``prv_accountant``, fenced off.

docs/accounting.md §5. ``prv_accountant`` is the tightest accountant we have, and it is
fragile: it raises ("Discrete mean differs from continuous mean significantly"), runs
out of memory, or takes minutes at large epsilon / small sigma. So every PRV computation
runs in a child process with a hard deadline and an address-space limit
(:func:`run_isolated`); the caller gets either a checked result or a :class:`PrvFailure`
with the reason, and falls back to ``rdp`` (docs/accounting.md §5.3). Nothing here can hang or crash
its caller.

The functions named ``*_in_process`` are what the child runs; they are pure and are
tested directly too.
"""

from __future__ import annotations

import math
import os
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from accounting import rdp, search
from accounting.errors import log_fallback_detail
from accounting.processes import die_with_parent

# Default wall-clock limits for one isolated PRV job (docs/accounting.md §5.3).
EPSILON_TIME_LIMIT_S = 10.0
CALIBRATION_TIME_LIMIT_S = 20.0
# Extra address space the child may allocate beyond what it inherited; prv_accountant
# builds float128 grids that can reach tens of GB at small sigma, which must fail fast.
CHILD_MEMORY_HEADROOM_BYTES = 3 * 1024**3

Phases = Sequence[tuple[float, float, int]]

# The orders prv_accountant uses for its safe domain size (see safe_domain_size).
_PRV_DOMAIN_ORDERS = tuple([1.0 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)))


class PrvFailure(Exception):
    """PRV gave no usable answer; ``reason`` says why in the user's terms (shown on fallback),
    ``detail`` the internal cause (an exception's text, the numbers), logged at debug level only."""

    def __init__(self, reason: str, detail: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.detail = detail


# What users read when prv_accountant itself raises (e.g. "Discrete mean differs from continuous
# mean significantly"): the exception's text is the detail, logged, not shown (docs/accounting.md §5.3).
PRV_RAISED = "prv's discretisation cannot represent this history (its numerical checks failed)"


def eps_error_for(reference_epsilon: float) -> float:
    """PRV's epsilon discretisation error: 1% of the reference, within [0.01, 0.05].

    The upper bound is estimate + eps_error, so a relative error keeps the bound
    about 1% loose at ordinary scales; the floor (Opacus' fixed choice) keeps the grid,
    and the time, bounded when epsilon is small; the cap keeps it coarse where epsilon
    is huge.
    """
    if not math.isfinite(reference_epsilon):
        return 0.05
    return min(0.05, max(0.01, 0.01 * reference_epsilon))


def bounds_in_process(phases: Phases, delta: float, eps_error: float) -> tuple[float, float, float]:
    """(lower, estimate, upper) epsilon of the composed phases; raises on any trouble.

    One ``PoissonSubsampledGaussianMechanism`` per phase, composed with
    ``max_self_compositions = num_self_compositions = steps`` (heterogeneous composition).
    delta_error = delta / 1000, as Opacus uses.
    """
    accountant, steps = _accountant(phases, delta, eps_error)
    return checked_bounds(accountant.compute_epsilon(delta=delta, num_self_compositions=steps))


def checked_bounds(bounds: Sequence[float]) -> tuple[float, float, float]:
    """Reject anything that is not finite, non-negative and ordered lower <= est <= upper."""
    lower, estimate, upper = (float(v) for v in bounds)
    if not all(math.isfinite(v) for v in (lower, estimate, upper)):
        raise PrvFailure("prv's epsilon bounds came out non-finite", f"bounds ({lower}, {estimate}, {upper})")
    if upper < 0 or estimate < 0 or not lower <= estimate <= upper:
        raise PrvFailure("prv's epsilon bounds came out negative or out of order", f"bounds ({lower}, {estimate}, {upper})")
    return max(lower, 0.0), estimate, upper


def safe_domain_size(phases: Phases, max_steps: Sequence[int], eps_error: float, delta_error: float) -> float:
    """prv_accountant's ``compute_safe_domain_size`` (its Remark 5.6 recipe), on our RDP.

    Same recipe, same orders (1.1 ... 10.9, 12 ... 63), same conversion; only the RDP
    values come from :mod:`accounting.rdp`, which are >= prv_accountant's own (absolute
    series terms plus a tail bound), so the domain is at least as large, i.e. as safe.
    It replaces a per-order Python loop that took about a third of each PRV call.
    """
    grid = rdp.order_grid(_PRV_DOMAIN_ORDERS)
    orders = grid.orders
    curves = [rdp.rdp_curve(p[0], p[1], grid) for p in phases]
    total_steps = sum(max_steps)

    def rdp_epsilon(curve: np.ndarray, delta: float) -> float:
        with np.errstate(invalid="ignore", divide="ignore"):
            values = curve - np.log(delta * orders) / (orders - 1.0) + np.log1p(-1.0 / orders)
        return float(np.nanmin(values))

    composed = sum((n * c for n, c in zip(max_steps, curves)), np.zeros(orders.size))
    size = rdp_epsilon(composed, delta_error / 4.0)
    for curve in curves:
        size = max(size, rdp_epsilon(curve, delta_error / 8.0 / total_steps))
    return max(size, eps_error) + 3.0


def _accountant(phases: Phases, delta: float, eps_error: float, max_steps: Sequence[int] | None = None) -> Any:
    from prv_accountant import PoissonSubsampledGaussianMechanism, PRVAccountant

    steps = [int(p[2]) for p in phases]
    limits = list(max_steps) if max_steps is not None else steps
    delta_error = delta / 1000.0
    domain = safe_domain_size(phases, limits, eps_error, delta_error)
    if not math.isfinite(domain):
        raise PrvFailure("prv: no finite discretisation domain for these parameters")
    prvs = [PoissonSubsampledGaussianMechanism(sampling_probability=p[0], noise_multiplier=p[1]) for p in phases]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eps_max makes prv_accountant warn; we computed it safely
        accountant = PRVAccountant(
            prvs=prvs, eps_error=eps_error, delta_error=delta_error, max_self_compositions=limits, eps_max=domain
        )
    return accountant, steps


def calibrate_sigma_in_process(
    sampling_rate: float,
    rounds: int,
    target: float,
    delta: float,
    spent: Phases,
    start_sigma: float,
    sigma_min: float,
    sigma_max: float,
    xtol: float,
) -> tuple[float, tuple[float, float, float], bool]:
    """Smallest sigma whose PRV upper bound meets ``target`` (docs/accounting.md §7.2).

    Bracketed from ``start_sigma`` (the rdp answer, usually feasible under PRV already,
    so the bracket is found going down) and refined on log sigma. Returns
    (sigma, its bounds, at_floor). Raises :class:`PrvFailure` on any PRV error.
    """
    eps_error = eps_error_for(target)
    cache: dict[float, tuple[float, float, float]] = {}

    def g(x: float) -> float:
        sigma = math.exp(x)
        bounds = bounds_in_process([*spent, (sampling_rate, sigma, rounds)], delta, eps_error)
        cache[x] = bounds
        return search.log_ratio(bounds[2], target)

    try:
        found = search.bracket(g, math.log(start_sigma), math.log(sigma_min), math.log(sigma_max), first_step=0.1)
    except search.NoFeasiblePoint:
        raise PrvFailure(f"prv: no noise multiplier up to {sigma_max:g} meets the target") from None
    found = search.refine(g, found, xtol)
    return math.exp(found.hi), cache[found.hi], found.at_floor


def sampling_rate_in_process(
    noise_multiplier: float,
    rounds: int,
    target: float,
    delta: float,
    spent: Phases,
    start_rate: float,
    rate_min: float,
    xtol: float,
) -> tuple[float, tuple[float, float, float]]:
    """Largest q in (0, 1] whose PRV upper bound meets ``target``; x = -log q (docs/accounting.md §7.3)."""
    eps_error = eps_error_for(target)
    cache: dict[float, tuple[float, float, float]] = {}

    def g(x: float) -> float:
        rate = min(1.0, math.exp(-x))
        bounds = bounds_in_process([*spent, (rate, noise_multiplier, rounds)], delta, eps_error)
        cache[x] = bounds
        return search.log_ratio(bounds[2], target)

    # Start from the rdp answer (feasible under PRV in practice): q = 1 is only tried when
    # the search walks there, because PRV at a q far above the answer can be very slow.
    try:
        found = search.bracket(g, -math.log(start_rate), 0.0, -math.log(rate_min), first_step=0.1)
    except search.NoFeasiblePoint:
        raise PrvFailure(f"prv: even sampling_rate={rate_min:g} exceeds the target") from None
    found = search.refine(g, found, xtol)
    return min(1.0, math.exp(-found.hi)), cache[found.hi]


def rounds_in_process(
    sampling_rate: float,
    noise_multiplier: float,
    target: float,
    delta: float,
    spent: Phases,
    start_rounds: int,
    rounds_max: int,
) -> tuple[int, tuple[float, float, float] | None]:
    """Most rounds T whose PRV upper bound meets ``target``; integer search (docs/accounting.md §7.4).

    One accountant discretised for ``max_self_compositions = limit`` serves every T up to
    the limit (only the FFT composition is recomputed), and the limit grows x2 while T =
    limit still fits. Returns (T, bounds at T), bounds None when T = 0.
    """
    eps_error = eps_error_for(target)
    spent_steps = [int(p[2]) for p in spent]
    limit = max(2 * start_rounds + 1, 2)
    best, best_bounds = 0, None
    while True:
        accountant, _ = _accountant(
            [*spent, (sampling_rate, noise_multiplier, limit)], delta, eps_error, max_steps=[*spent_steps, limit]
        )

        def bounds_at(t: int) -> tuple[float, float, float]:
            return checked_bounds(accountant.compute_epsilon(delta=delta, num_self_compositions=[*spent_steps, t]))

        top = bounds_at(limit)
        if top[2] <= target:
            best, best_bounds = limit, top
            if limit >= rounds_max:
                return rounds_max, top
            limit = min(2 * limit, rounds_max)
            continue
        lo, hi = best, limit  # lo fits (or is 0), hi does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            bounds = bounds_at(mid)
            if bounds[2] <= target:
                lo, best_bounds = mid, bounds
            else:
                hi = mid
        return lo, (best_bounds if lo > 0 else None)


def run_isolated(fn: Callable[..., Any], args: tuple[Any, ...], time_limit_s: float) -> Any:
    """Run ``fn(*args)`` in a child process; its result, or :class:`PrvFailure`.

    The child is forked (cheap, and it inherits the imported modules) where the
    platform allows, else spawned; it is killed at the deadline, and it dies with this
    process if this one dies first (``die_with_parent``, docs/architecture.md §Processes),
    instead of computing on for minutes as an orphan. Any exception in the child, a
    crash, or the deadline becomes a PrvFailure with the reason.
    """
    # start-up time: imported here, so a question no PRV job answers (every pld or rdp
    # question of `gdpfed account`) does not load multiprocessing (issue 26 §3)
    import multiprocessing

    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    if method == "fork":
        preload()
    context: Any = multiprocessing.get_context(method)  # typeshed's BaseContext lacks Process
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_child_main, args=(sender, fn, args, os.getpid()), daemon=True)
    started = time.monotonic()
    process.start()
    sender.close()
    try:
        if not receiver.poll(time_limit_s):
            raise PrvFailure(f"prv did not finish within {time_limit_s:g} s")
        try:
            status, payload = receiver.recv()
        except EOFError:
            process.join(1.0)
            raise _logged(PrvFailure("prv's worker process ended without an answer", f"exit code {process.exitcode}")) from None
    finally:
        receiver.close()
        if process.is_alive():
            process.kill()
        process.join(max(1.0, time_limit_s - (time.monotonic() - started)))
    if status != "ok":
        raise _logged(PrvFailure(*payload))
    return payload


def _logged(failure: PrvFailure) -> PrvFailure:
    """``failure``, its internal detail logged at debug level (accounting.errors.log_fallback_detail)."""
    if failure.detail:
        log_fallback_detail("prv", f"{failure.reason}: {failure.detail}")
    return failure


def preload() -> None:
    """Import ``prv_accountant`` here, in the parent, so that every forked child inherits it.

    Otherwise each PRV job imports it (and scipy.stats behind it) in its fresh child, which
    took 5-6 s of every call on a loaded machine, against about 0.5 s for the computation
    itself. Python imports a module once, so later calls cost a dictionary lookup. An
    import that fails is left to the child, which reports it as a :class:`PrvFailure`.
    """
    try:
        import prv_accountant  # noqa: F401
    except Exception:  # reported by the child, where it counts
        return


def _child_main(sender: Any, fn: Callable[..., Any], args: tuple[Any, ...], parent: int) -> None:
    die_with_parent(parent)
    try:
        _limit_memory()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import numpy as np

            with np.errstate(all="ignore"):
                result = fn(*args)
        sender.send(("ok", result))
    except PrvFailure as exc:
        sender.send(("error", (exc.reason, exc.detail)))
    except MemoryError:
        sender.send(("error", ("prv needed more memory than its limit allows", None)))
    except BaseException as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        sender.send(("error", (PRV_RAISED, f"{type(exc).__name__}{': ' + message if message else ''}")))
    finally:
        sender.close()


def _limit_memory() -> None:
    """Cap the child's address space at what it inherited plus the headroom."""
    try:
        import resource

        with open(f"/proc/{os.getpid()}/status") as status:
            size_kb = next(int(line.split()[1]) for line in status if line.startswith("VmSize:"))
        limit = size_kb * 1024 + CHILD_MEMORY_HEADROOM_BYTES
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ImportError, OSError, StopIteration, ValueError):
        return  # no /proc or no rlimits here: the deadline still bounds the child

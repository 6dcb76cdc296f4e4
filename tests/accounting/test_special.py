"""accounting/special.py: scipy.special's gammaln and log_ndtr without scipy, bit for bit
(docs/accounting.md §13.10). The tests import scipy to compare, so they call the ports
(ported_gammaln, ported_log_ndtr) by name: gammaln and log_ndtr run scipy's own ufunc
wherever scipy.special is loaded."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from accounting import rdp, special

scipy_special = pytest.importorskip("scipy.special")


def _assert_same_bits(ours: np.ndarray, theirs: np.ndarray, x: np.ndarray) -> None:
    """Every value has scipy's bits (signed zeros included); NaN where scipy's is NaN."""
    same = (ours.view(np.int64) == theirs.view(np.int64)) | (np.isnan(ours) & np.isnan(theirs))
    assert same.all(), (int((~same).sum()), x[~same][:8], (ours - theirs)[~same][:8])


def _around(points: list[float]) -> np.ndarray:
    """Each point and its two floating-point neighbours."""
    p = np.array(points, dtype=float)
    return np.concatenate([p, np.nextafter(p, -np.inf), np.nextafter(p, np.inf)])


def _rdp_gamma_arguments() -> np.ndarray:
    """What rdp asks gammaln: k + 1 for the integer orders' log k!, and for every fractional
    order of the default grid alpha + 1 and alpha - i + 1 for every term i of its series
    (negative from i = alpha + 2 on: log |Gamma| of the binomial's magnitude)."""
    orders = rdp.default_orders()
    fractional = orders[orders != np.round(orders)]
    i = np.arange(rdp._MAX_TERMS + 1, dtype=float)
    return np.concatenate([np.arange(1.0, 1026.0), fractional + 1, (fractional[:, None] - i + 1).reshape(-1)])


def _gamma_inputs() -> np.ndarray:
    rng = np.random.default_rng(2632)
    magnitudes = 10.0 ** rng.uniform(-310.0, 308.0, 200_000)
    return np.concatenate([
        _rdp_gamma_arguments(),
        np.arange(-200.0, 2001.0),  # the poles (0, -1, -2, ...) and log k!
        np.arange(-1000.0, 2001.0) + 0.5,
        rng.uniform(-1100.0, 1100.0, 600_000),
        rng.uniform(-40.0, 15.0, 200_000),  # the recurrence and the reflection's edge
        magnitudes, -magnitudes,
        10.0 ** rng.uniform(2.9, 9.0, 50_000),  # lgam_large_x, short and bare
        _around([2.0, 3.0, 13.0, 1000.0, 1e8, -34.0, 2.556348e305, 5e-324, 1.0]),
        [0.0, -0.0, math.inf, -math.inf, math.nan, 1.7e308, -1.7e308],
    ])


def test_gammaln_is_cephes_lgam_as_scipy_runs_it_bit_for_bit() -> None:
    # every branch of lgam (the reflection below -34, the recurrence to [2, 3), Stirling's
    # series from 13, its short form from 1000 and bare form past 1e8, the poles and the
    # non-finite arguments) on 1.3 million arguments, rdp's own among them
    x = _gamma_inputs()
    _assert_same_bits(special.ported_gammaln(x), scipy_special.gammaln(x), x)


def _normal_inputs() -> np.ndarray:
    rng = np.random.default_rng(2633)
    root2 = math.sqrt(2.0)
    magnitudes = 10.0 ** rng.uniform(-310.0, 308.0, 100_000)
    return np.concatenate([
        rng.uniform(-45.0, 12.0, 600_000),  # rdp's arguments (z0 - i)/sigma lie here
        rng.normal(0.0, 3.0, 200_000),
        -(10.0 ** rng.uniform(0.0, 9.0, 200_000)),  # erfcx's Chebyshev pieces and continued fraction
        magnitudes, -magnitudes,
        # log_ndtr's switch at -1; erfc's at |t| = 1 and 8 and its underflow; erfcx's at 50
        # and 5e7; Cephes log1p's at 1 + v = 1/sqrt 2 (v = -erfc(t)/2 = 1/sqrt 2 - 1 near x = -0.55)
        _around([-1.0, root2, -root2, 8 * root2, 37.5 * root2, 38.6, -50 * root2, -5e7 * root2, -0.5446, 0.0]),
        [-0.0, math.inf, -math.inf, math.nan, 1.7e308, -1.7e308],
    ])


def test_log_ndtr_is_xsfs_as_scipy_runs_it_bit_for_bit() -> None:
    # log(erfcx(-t)/2) - t^2 below -1 (Faddeeva's erfcx: its Chebyshev pieces and continued
    # fraction) and Cephes' log1p(-erfc(t)/2) from -1 on, on 1.2 million arguments
    x = _normal_inputs()
    _assert_same_bits(special.ported_log_ndtr(x), scipy_special.log_ndtr(x), x)


def _erfc_inputs() -> np.ndarray:
    rng = np.random.default_rng(2634)
    return np.concatenate([rng.uniform(-30.0, 60.0, 300_000), rng.normal(0.0, 2.0, 100_000),
                           10.0 ** rng.uniform(-300.0, 300.0, 50_000), -(10.0 ** rng.uniform(-300.0, 300.0, 50_000)),
                           _around([0.0, 1.0, -1.0, 8.0, -8.0, 26.7, -26.7, -6.1, 50.0, 5e7, 26.6]),
                           [math.inf, -math.inf, math.nan]])


def test_erfc_and_erfcx_are_scipys_bit_for_bit() -> None:
    # erfcx for negative arguments too (2 exp(x^2) - erfcx_y100(400/(4 - x)), its overflow)
    x = _erfc_inputs()
    _assert_same_bits(special.erfc(x), scipy_special.erfc(x), x)
    _assert_same_bits(special.erfcx(x), scipy_special.erfcx(x), x)


def _pieces(x: np.ndarray) -> set[int]:
    """The Chebyshev pieces erfcx uses at ``x``: floor(400/(4 + |x|)) for -6.1 <= x <= 50."""
    used = x[(x >= -6.1) & (x <= 50.0)]
    return set(np.floor(400 / (4 + np.abs(used))).astype(int).tolist()) - {100}


def test_the_samples_reach_every_reachable_chebyshev_piece() -> None:
    # a changed coefficient can only show where its piece is used: erfcx_y100 is asked
    # y100 = 400/(4 + |x|) for |x| <= 50, i.e. pieces 7..99 (0..6 lie past x = 50, where
    # the continued fraction answers instead, in scipy as here). log_ndtr asks erfcx at
    # -t > 1/sqrt 2: pieces 7..84; the erfcx test's sample reaches them all
    t = -_normal_inputs() * special._SQRT1_2
    assert _pieces(t[t > special._SQRT1_2]) == set(range(7, 85))
    assert _pieces(_erfc_inputs()) == set(range(7, 100))
    assert special._ERFCX_Y100.shape == (100, 7)


def test_the_accountants_entry_points_give_the_same_bits_by_either_path() -> None:
    # gammaln and log_ndtr run scipy's ufunc where scipy.special is loaded (as here) and the
    # port where it is not: the same values
    x = np.random.default_rng(2635).uniform(-40.0, 40.0, 20_000)
    assert "scipy.special" in sys.modules
    for entry, port in ((special.gammaln, special.ported_gammaln), (special.log_ndtr, special.ported_log_ndtr)):
        _assert_same_bits(entry(x), port(x), x)
    assert special.gammaln(np.full((2, 3), 4.5)).shape == (2, 3) and special.log_ndtr(-3.0).shape == ()


def test_the_port_and_rdp_import_no_scipy() -> None:
    # issue 26 §3: scipy.special cost a rdp question 0.1-0.2 s of its start; without it loaded,
    # the entry points run the port (calls up to PORT_MAX values), with scipy's values
    code = (
        "import sys, numpy as np\n"
        "from accounting import rdp, special\n"
        "curve = rdp.rdp_curve(0.01, 1.1)\n"
        "x = np.linspace(-40.0, 40.0, 2001)\n"
        "values = special.gammaln(x), special.log_ndtr(x)\n"
        "assert not [m for m in sys.modules if m == 'scipy' or m.startswith('scipy.')], sorted(sys.modules)\n"
        "import scipy.special as s\n"
        "assert np.array_equal(values[0], s.gammaln(x)) and np.array_equal(values[1], s.log_ndtr(x))\n"
        "assert curve.tobytes() == rdp.rdp_curve(0.01, 1.1).tobytes()  # now through scipy's ufuncs\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)


def test_the_ports_log_gammas_are_computed_once_per_argument(monkeypatch: pytest.MonkeyPatch) -> None:
    # rdp's log-gammas depend on the orders alone: a calibration's later evaluations take
    # them from the memo (the port's recurrence was most of an evaluation), with the same
    # values, and the memo stays bounded
    calls: list[int] = []
    port = special.ported_gammaln

    def counted(x: np.ndarray) -> np.ndarray:
        calls.append(np.asarray(x).size)
        return port(x)

    monkeypatch.setattr(special, "ported_gammaln", counted)
    monkeypatch.setattr(special, "_GAMMALN_MEMO", {})
    monkeypatch.setattr(special, "_scipy_special", lambda size: None)  # the path without scipy loaded
    alpha = np.array([1.5, 2.5, 3.7, 3.7, 10.9])
    first = rdp.log_a_fractional(0.01, 1.1, alpha)
    assert calls
    calls.clear()
    assert np.array_equal(rdp.log_a_fractional(0.02, 0.9, alpha[::-1]), rdp.log_a_fractional(0.02, 0.9, alpha[::-1]))
    assert np.array_equal(rdp.log_a_fractional(0.01, 1.1, alpha), first)
    assert calls == []
    arguments = _rdp_gamma_arguments()[:5000]
    _assert_same_bits(special.gammaln(arguments), scipy_special.gammaln(arguments), arguments)
    monkeypatch.setattr(special, "_GAMMALN_MEMO", {})
    monkeypatch.setattr(special, "GAMMALN_MEMO_MAX", 1000)
    for part in (arguments[:900], arguments[900:1800], arguments):
        _assert_same_bits(special.gammaln(part), scipy_special.gammaln(part), part)
        assert 0 < len(special._GAMMALN_MEMO) <= 1000


def test_scipys_ufuncs_stand_in_for_the_ports_only_under_the_scipy_they_follow(monkeypatch: pytest.MonkeyPatch) -> None:
    # docs/accounting.md §13.10: with scipy.special loaded (a plan, the service) its ufuncs run
    # in the ports' place because they are the same bits; another scipy's may round a value
    # differently, and an rdp figure would then depend on what the process imported first
    import scipy

    scipy_special = pytest.importorskip("scipy.special")
    monkeypatch.setattr(scipy, "__version__", special.PORTED_SCIPY + "1")
    assert special._scipy_special(10) is scipy_special
    assert special._scipy_special(special.PORT_MAX + 1) is scipy_special
    for other in ("1.18.0", "1.16.3", "2.0.0"):
        monkeypatch.setattr(scipy, "__version__", other)
        assert special._scipy_special(10) is None
        assert special._scipy_special(special.PORT_MAX + 1) is None

"""Golden digests (issue 28): fixed-seed runs of every privacy unit (client, silo, metric),
every training strategy of each unit and every secure-aggregation execution mode hash to
the values recorded on the code before the trainer was reorganised, bit for bit
(``tests/trainer/run_digests.py`` says what is hashed and what is left out).

A digest that moves means a run computes something else: a behaviour change, never a
refactor. Re-record only for a change that means to alter what runs compute, and say so in
the commit. The Flower executor's digest is in ``tests/trainer/flower/test_flower_digests.py``.
The whole set takes seconds on one core (three rounds, tiny models), so all of it runs in
CI's short pass.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.trainer.run_digests import (
    ROUNDS,
    client_plan,
    discrete_client_plan,
    one_torch_thread,
    opted_out_plan,
    run_digest,
    with_adaptive_clip,
)
from tests.trainer.trainer_plans import quiet_progress
from trainer.runner import TrainConfig, execute_run, prepare_run


def _run(plan: Any, config: TrainConfig, dataset: Any, out: Path) -> Path:
    prepared = prepare_run(plan, plan.model_dump(mode="json"), config, out, dataset=dataset, device="cpu")
    execute_run(prepared, progress=quiet_progress(config.rounds))
    return out


# ----------------------------------------------------------------------------- client-level


def _digits(num_clients: int, **options: Any) -> Any:
    from trainer.data import load_dataset

    return load_dataset("digits", num_clients=num_clients, seed=0, **options)


def _client_config(**overrides: Any) -> TrainConfig:
    base: dict[str, Any] = dict(
        dataset="digits", model="mlp", model_options={"hidden": [16]}, rounds=ROUNDS, local_steps=2, lr=0.1,
        batch_size=16, server_momentum=0.5, late_dropout_fraction=0.5, eval_every=2, secagg_workers=1,
    )
    base.update(overrides)
    return TrainConfig.model_validate(base)


def client_run(out: Path, *, strategy: str = "plan", options: dict[str, Any] | None = None, plan: Any = None,
               one_label: bool = False, **config: Any) -> Path:
    plan = plan or client_plan()
    data_options: dict[str, Any] = {}
    if one_label:  # FedHDP's and adaptive clipping's setting: one label per client, local test rows
        data_options = {"partition": "one_label", "client_test_fraction": 0.25}
        config = {"partition": "one_label", "dataset_options": {"client_test_fraction": 0.25}, **config}
    data = _digits(plan.scenario.total_clients, **data_options)
    return _run(plan, _client_config(strategy=strategy, strategy_options=options or {}, **config), data, out)


# ----------------------------------------------------------------------------- silo


def silo_run(out: Path, method: str) -> Path:
    from planner.units import make_plan
    from planner.units.silo_sample import SiloScenario
    from trainer.data.silos import load_silo_data, mean_estimation

    digits = method == "ifca_mrmtl"
    sizes = [30, 30, 30, 30] if digits else [30, 50, 20]
    scenario = SiloScenario.model_validate({
        "silos": [{"id": f"s{k}", "num_samples": n, "epsilon": 2.0} for k, n in enumerate(sizes)],
        "delta": 1e-5, "rounds": ROUNDS, "batch_size": 10 if digits else 8, "clip_norm": 1.0, "accountant": "rdp",
    })
    plan = make_plan(scenario, method)
    options = {"prox": 0.5} if method in ("mrmtl", "ifca_mrmtl", "ditto") else {}
    if digits:
        data = load_silo_data("rotated_digits", sizes, seed=0, test_samples=10)
        config = TrainConfig(dataset="rotated_digits", model="mlp", model_options={"hidden": []}, rounds=ROUNDS,
                             lr=0.1, eval_every=2, strategy_options=options)
    else:
        data = mean_estimation(sizes, seed=0)
        config = TrainConfig(dataset="mean_estimation", model="mean", rounds=ROUNDS, lr=0.1, eval_every=2,
                             strategy_options=options)
    return _run(plan, config, data, out)


def silo_hidden_run(out: Path) -> Path:
    """A silo run through an MLP with a hidden layer (the DP-SGD engine's other gradient path)."""
    from planner.units import make_plan
    from planner.units.silo_sample import SiloScenario
    from trainer.data.silos import load_silo_data

    sizes = [20, 20, 20]
    scenario = SiloScenario.model_validate({
        "silos": [{"id": f"s{k}", "num_samples": n, "epsilon": 3.0} for k, n in enumerate(sizes)],
        "delta": 1e-5, "rounds": ROUNDS, "batch_size": 10, "clip_norm": 1.0, "accountant": "rdp",
    })
    plan = make_plan(scenario, "mrmtl")
    data = load_silo_data("rotated_digits", sizes, seed=0, test_samples=10)
    config = TrainConfig(dataset="rotated_digits", model="mlp", model_options={"hidden": [8]}, rounds=ROUNDS, lr=0.1,
                         eval_every=2, strategy_options={"prox": 0.5})
    return _run(plan, config, data, out)


# ----------------------------------------------------------------------------- metric


def metric_run(out: Path, rule: str = "public") -> Path:
    from planner.units.metric_local import MetricScenario, plan_metric
    from trainer.data.metric_synthetic import load_metric_synthetic

    radius = None if rule == "own_update" else 0.05
    plan = plan_metric(MetricScenario.model_validate({
        "groups": [{"id": "all", "num_clients": 30, "noise_multiplier": 5.0, "leakage_budget": 1.0}],
        "rounds": ROUNDS, "model_dim": 2, "clients_per_round": 7, "hypotheses": 2, "radius_rule": rule,
        "radius": radius, "min_radius": 0.01 if rule == "previous_round" else None,
    }))
    data = load_metric_synthetic(num_clients=30, seed=0)
    config = TrainConfig(dataset="metric_synthetic", partition="natural", model="mlp",
                         model_options={"hidden": [], "bias": False}, local_steps=1, batch_size=10, lr=0.1,
                         rounds=ROUNDS, eval_every=2, strategy="metric_ifca")
    return _run(plan, config, data, out)


# name -> the run, into the directory given
SCENARIOS: dict[str, Callable[[Path], Path]] = {
    # client-level: the plan strategy under both execution modes, with dropouts before and after masking
    "client/plan/protocol": (lambda out: client_run(out)),
    "client/plan/exact_sum": (lambda out: client_run(out, secagg_execution="exact_sum")),
    "client/plan/protocol/sparse": (lambda out: client_run(out, secagg_mode="sparse")),
    "client/plan/protocol/full": (lambda out: client_run(out, secagg_mode="full")),
    "client/plan/loop_engine": (lambda out: client_run(out, engine="loop", secagg_execution="exact_sum")),
    # the discrete mechanism, the default on a plan that states its blocks (issue 27): the same
    # dropouts before and after masking, the residues through the protocol or its exact sum
    "client/plan/skellam/protocol": (lambda out: client_run(out, plan=discrete_client_plan())),
    "client/plan/skellam/exact_sum": (lambda out: client_run(out, plan=discrete_client_plan(),
                                                             secagg_execution="exact_sum")),
    "client/pfa/exact_sum": (lambda out: client_run(out, strategy="pfa", options={"rank": 2, "history": 2},
                                                    secagg_execution="exact_sum")),
    "client/pfa/protocol": (lambda out: client_run(out, strategy="pfa", options={"rank": 2, "history": 2})),
    "client/fedhdp/exact_sum": (lambda out: client_run(out, strategy="fedhdp", plan=opted_out_plan(), one_label=True,
                                                       secagg_execution="exact_sum")),
    "client/plan/adaptive_clip/exact_sum": (
        lambda out: client_run(out, options={"adaptive_clip": True}, one_label=True, secagg_execution="exact_sum",
                               plan=with_adaptive_clip(opted_out_plan(), initial_clip_norm=2.0, target_quantile=0.5,
                                                       learning_rate=0.5))),
    "client/plan/adaptive_clip/protocol": (
        lambda out: client_run(out, options={"adaptive_clip": True}, one_label=True,
                               plan=with_adaptive_clip(opted_out_plan(), learning_rate=0.5))),
    "client/fedhdp/adaptive_clip/exact_sum": (
        lambda out: client_run(out, strategy="fedhdp", options={"adaptive_clip": True}, one_label=True,
                               secagg_execution="exact_sum",
                               plan=with_adaptive_clip(opted_out_plan(), learning_rate=0.5))),
    # silo: every method of the unit (the plan's method is the strategy)
    **{f"silo/{method}": functools.partial(silo_run, method=method)
       for method in ("mrmtl", "local", "fedavg", "finetune", "ditto", "ifca_mrmtl")},
    "silo/mrmtl/hidden_layer": silo_hidden_run,
    # metric: metric_ifca under each radius rule
    "metric/metric_ifca/public": (lambda out: metric_run(out, "public")),
    "metric/metric_ifca/previous_round": (lambda out: metric_run(out, "previous_round")),
    "metric/metric_ifca/own_update": (lambda out: metric_run(out, "own_update")),
}

# recorded on the code before issue 28 moved it (commit "golden digests ... recorded before the move").
# Issue 26 §3 (pld's normal tails in numpy, accounting/normal.py) moved the summary digest of every
# client and silo run whose summary states an epsilon_tight: that pld figure moved in its 12th-13th
# significant digit (e.g. silo/local s0 1.7873810617207813 -> 1.787381061719568, client/plan strict
# 4.488661294138794 -> 4.488661294137307), nothing else in the summary; every rounds and params digest
# and the metric runs' digests are unchanged, so the runs compute the same models and ledgers.
EXPECTED: dict[str, dict[str, str]] = {
    "client/plan/protocol": {
        "rounds": "26a3633f26feced14bff0787ef44bfdf11d008d076199f61233eb91e115adfd6",
        "summary": "a3f1ce92b9d698a0d787f3d9331376c402f58a5f9386112976d407d3bd513a6d",
        "params": "549a3f525efa0c22f454332e9314c7bd9d232d13fef6e4e67a3bf2bf52e123f9",
    },
    "client/plan/exact_sum": {
        "rounds": "26a3633f26feced14bff0787ef44bfdf11d008d076199f61233eb91e115adfd6",
        "summary": "a8d6d12eef6af791d96deba11892bf0d46b2b9e445b097afad360941b38a0e36",
        "params": "549a3f525efa0c22f454332e9314c7bd9d232d13fef6e4e67a3bf2bf52e123f9",
    },
    "client/plan/protocol/sparse": {
        "rounds": "130fb8d009e15c76f3b9e51cc6b0d95c5a3e645f63690c6eac700f90edf5f19e",
        "summary": "28640c7d514b9d635ee78b680298533a5fe4aef3bfe545bd1b34b2774e7eb3b5",
        "params": "549a3f525efa0c22f454332e9314c7bd9d232d13fef6e4e67a3bf2bf52e123f9",
    },
    "client/plan/protocol/full": {
        "rounds": "26a3633f26feced14bff0787ef44bfdf11d008d076199f61233eb91e115adfd6",
        "summary": "acf225d5c15e3362be5886701a88f8e8c656bb8915494e4016aeadda34fc9e83",
        "params": "549a3f525efa0c22f454332e9314c7bd9d232d13fef6e4e67a3bf2bf52e123f9",
    },
    "client/plan/loop_engine": {
        "rounds": "26a3633f26feced14bff0787ef44bfdf11d008d076199f61233eb91e115adfd6",
        "summary": "a8d6d12eef6af791d96deba11892bf0d46b2b9e445b097afad360941b38a0e36",
        "params": "549a3f525efa0c22f454332e9314c7bd9d232d13fef6e4e67a3bf2bf52e123f9",
    },
    # recorded on issue 27's code (the default skellam run), not before the move. Their summaries
    # re-recorded at the merge of h27plan: the blocks are rdp's (the plan's accountant), unchanged,
    # and so are the rounds, parameters and epsilon_spent; only epsilon_tight, pld's figure of the
    # Skellam history, moved in its 11th digit (24.064652354553786 -> 24.064652354523396, strict
    # 3.7660405754875104 -> 3.7660405754846895) with h27plan's one-pass unit-shift table.
    # Summaries re-recorded when the plan's noise-to-signal ratio began counting the Skellam blocks'
    # noise (h36nts, docs/planning.md §13): the run's start-of-run warning reads "plan
    # noise-to-signal ratio 2.23" where it read 2.03 (p_strict's block adds std 1.359 where its
    # continuous std is 1.2); rounds and parameters, and every other line of the summary, unchanged.
    "client/plan/skellam/protocol": {
        "rounds": "bcd2d3ea8447aedec7442b7b921d847345da95ea6a6849097cf408c16cf8e443",
        "summary": "1c37ad13f7433c4039e6ae4b0a2afd01299fbe930e75829c93ee480def9e8395",
        "params": "e827156c5ffdbaf1e02dadcee184b1533a5579f358ce51efc8c22c4a05f56306",
    },
    "client/plan/skellam/exact_sum": {
        "rounds": "bcd2d3ea8447aedec7442b7b921d847345da95ea6a6849097cf408c16cf8e443",
        "summary": "9dc3d69bfdeb9250dfc3155674b9912cf4088953cc4077f8aa2b083534e3c1bd",
        "params": "e827156c5ffdbaf1e02dadcee184b1533a5579f358ce51efc8c22c4a05f56306",
    },
    "client/pfa/exact_sum": {
        "rounds": "9f3f052e0e1b6798a608694340dc1dfcca65ddf1dd72e73b9fc21b43cdc180d9",
        "summary": "984504ffd8579cfa9b29ae14acf5d03aa59a5f91ae91ccb8c8f8f13b6337d0b7",
        "params": "cf92a324d44cd42625a0216a6edf96604e0fdbfa3583b0ef5a3022fd749576ed",
    },
    "client/pfa/protocol": {
        "rounds": "9f3f052e0e1b6798a608694340dc1dfcca65ddf1dd72e73b9fc21b43cdc180d9",
        "summary": "9917f2a09b4301e34dcd849c6793ea2701bd3e97de41e9f4d7e576c14f6181c6",
        "params": "cf92a324d44cd42625a0216a6edf96604e0fdbfa3583b0ef5a3022fd749576ed",
    },
    "client/fedhdp/exact_sum": {
        "rounds": "dfcd9500b6961ae40c77eaea86ffbe007579f640417bd7179e4b7dc79ec11fc2",
        "summary": "079b75637a0c1f6b1ab7178de4910eed65677d5120532a662dfb3d009914a252",
        "params": "bea52096cd78d966b2509f1d0672a1632fb3a3844a39f51e58ca00bcd78da79e",
    },
    "client/plan/adaptive_clip/exact_sum": {
        "rounds": "fa712fc05d614c65059393f7ba8de58d29315a22751833a9f43d81a1d4639115",
        "summary": "39ea93c448b0322e2ffe4ef8c4085efce3c1110cc65562eae36cfb8c8e35f503",
        "params": "3837c20c53538679ad6434375c18a960f960f2e1fe57e8020f3b059f64c8da0c",
    },
    "client/plan/adaptive_clip/protocol": {
        "rounds": "5fdad43877219be5a7e670c6f7f49d76d59a0960ff7a7f94cde6a263bde96de1",
        "summary": "b57835562fb72edb02d6cefcbc2b0fa9a99cccdb83f8da4c9c122a8cdc0e534b",
        "params": "bb52e6737e2fa0b95afe6095a9cd44e9ad7d0b55f96efa52341c287f986ba56e",
    },
    "client/fedhdp/adaptive_clip/exact_sum": {
        "rounds": "0bf069dfaa8d2bdbad09fc3660aa9e4471f850b7cf395b10f092ca1ddf3d1904",
        "summary": "321ef60275a8c51851965d3459ab2f58651cb05e36edeabb23abbf5c8cd0b2b8",
        "params": "05d4a334f4c3b95cc1bd94769d0797b2caedbd2f8b6bd4ad6c7cf7ecf6b75ed3",
    },
    "silo/mrmtl": {
        "rounds": "75c66859e555e9e1a8a0bd09be7974f739ebd919cce3b7239289aa4483e31e66",
        "summary": "1e7e5f99349733bbd0ae4f7db32123837b0c41acf429e7e8db38263a4baa734f",
        "params": "0332e2dd23f4df5047bdbc48c78d00628e07acc5899a68f31a650bace56226f3",
    },
    "silo/local": {
        "rounds": "b52a5fadd77b39f4e19a411bd7f4f21c45fab15d7642b9f7f962899208f26ad9",
        "summary": "e3bc766246e65fda51f87514662bf2bacb9aa0eb2465aab5bbc2e0d4d37ecb0b",
        "params": "55a92d961b3cbe0888c4b2dc503a4f878efe5bb3682d03c4a7f230b2e390ace6",
    },
    "silo/fedavg": {
        "rounds": "d90bb6f4426b917f17875bd7ab7ba74b76ba841ce157fcd53f5c59b860ce45c5",
        "summary": "fe4c5ad6d7c322eba6bade10cf54ebb15feeaf07fad766732304b7c12a0ddaeb",
        "params": "09dc7782bcc788e63c53d9c9c12ff60baa52164235646c9b1e5d2d4b08d81f78",
    },
    "silo/finetune": {
        "rounds": "3bac722368e574c3bf4c2f28880e2bc6e2b673ecc9746475fb5280cd28a1dfa5",
        "summary": "24af254a19fca9b619472e4f16aaec1542a1cdd8d46b10113de6d638cc09a712",
        "params": "4a53bd63612827b48b09f0effd68926555679c9dfe389d043ebb8c29568b57b3",
    },
    "silo/ditto": {
        "rounds": "9fab9764c3a54c5d3dd3d64c64044649014605aca8f3ca64094244e2781a42ee",
        "summary": "eee35af95ec52105f48d92e5c83c1547746f1f18729da8782d885e7c1c1b7020",
        "params": "1906a21253e93a8004979b2e0037fd2396595f431797e6a0e98f83d6b42b0df4",
    },
    "silo/ifca_mrmtl": {
        "rounds": "38fb63d69b973f655459cd42da11d708a055771a0a8336766532c054650053ce",
        "summary": "fd3079e9a97ef93d9bda21666af22a33feede2a4277818da6982a3e2305ee91d",
        "params": "2c39dacabd1627d3b356c0e88dd267898be3a5ecb49f842bf11ce36befd2a312",
    },
    "silo/mrmtl/hidden_layer": {
        "rounds": "2b9d8c6ae0ec19798c1b034cd65353c7bfb9e6ba2416ea69dec9d41ef68da0f5",
        "summary": "523d5f81ecaf6d2e184357f58c9c6ea38e511c7ba78ea1cdf550f876a8b92d51",
        "params": "4f5282283a606ed258664fd728c8d4159e8158521a07dc72076701862af37423",
    },
    "metric/metric_ifca/public": {
        "rounds": "792a214269b9ab5d0267185590706c8df3230957f642b95353e96542b75907c9",
        "summary": "0a57b9e29955bd2d2d443aff87c8814b75659d0c3b36f2ce6d966a7873595cf3",
        "params": "339ce60005f5db63ac1291c750298c7378203d06d6c02ebfca7dc93d466d67d5",
    },
    "metric/metric_ifca/previous_round": {
        "rounds": "252fb59ebd280aef58cd22243e26f494410f67f20d0284aa5552312740f7854e",
        "summary": "29bf80c60aa05488a3f9f453f004f6075e9cf5355b2b2af3029ca40764792665",
        "params": "8f7866c19fe90ada38eafbf0eaca6f58853718398d98d1fd5dc6cfc05a84e81f",
    },
    "metric/metric_ifca/own_update": {
        "rounds": "50873909664002cfaff29dc69d4ca6d931ef0c58daec49c78ccae695c760b55f",
        "summary": "ff256b67d65a43e197e6569507a46c777ffc28d6eaa85cb77198453ab507221c",
        "params": "4a28c507cf2a01963215fe31ce61589938b99ef82d5a3e276e5909fa56141e1e",
    },
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_a_fixed_seed_run_hashes_to_its_recorded_digest(name: str, tmp_path: Path) -> None:
    with one_torch_thread():
        assert run_digest(SCENARIOS[name](tmp_path / "run")) == EXPECTED[name]


def test_every_unit_and_execution_mode_has_a_default_scenario() -> None:
    """The set covers each privacy unit, each silo method, each registered strategy and
    both secure-aggregation execution modes."""
    from planner.units.silo_sample import SILO_METHODS
    from trainer.units.strategies import STRATEGIES

    quick = list(SCENARIOS)
    assert {name.split("/")[0] for name in quick} == {"client", "silo", "metric"}
    assert {name.split("/")[1] for name in quick if name.startswith("silo/")} == set(SILO_METHODS)
    assert {name.split("/")[1] for name in quick if not name.startswith("silo/")} == set(STRATEGIES)
    assert {"protocol", "exact_sum"} <= {part for name in quick for part in name.split("/")}
    assert set(EXPECTED) == set(SCENARIOS)

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

from tests.trainer.run_digests import ROUNDS, client_plan, opted_out_plan, run_digest, with_adaptive_clip
from tests.trainer.trainer_plans import quiet_progress
from trainer.run.runner import TrainConfig, execute_run, prepare_run


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

# recorded on the code before issue 28 moved it (commit "golden digests ... recorded before the move")
EXPECTED: dict[str, dict[str, str]] = {
    "client/plan/protocol": {
        "rounds": "bdb261a959cb1d24e046d43edaac51fe48b0498bb9ee3da7980532892ef1ff4a",
        "summary": "188a333f827166efe9bdd3bc3768ed4096566b5f53705375db522736593e5774",
        "params": "549a3f525efa0c22f454332e9314c7bd9d232d13fef6e4e67a3bf2bf52e123f9",
    },
    "client/plan/exact_sum": {
        "rounds": "bdb261a959cb1d24e046d43edaac51fe48b0498bb9ee3da7980532892ef1ff4a",
        "summary": "1eecca6daa07b5920b0cae023c002f606bdb6dcd5fef4c7115288dded361111c",
        "params": "549a3f525efa0c22f454332e9314c7bd9d232d13fef6e4e67a3bf2bf52e123f9",
    },
    "client/plan/protocol/sparse": {
        "rounds": "28ca23460eb967bee8f083b686d067ce2afd88a5c36eba31c30bc52fb641c116",
        "summary": "d2acf11ffd4177aa6b15300ddbe4dcff15a6f40bcc75b264cebd659d61ca26a3",
        "params": "549a3f525efa0c22f454332e9314c7bd9d232d13fef6e4e67a3bf2bf52e123f9",
    },
    "client/plan/protocol/full": {
        "rounds": "bdb261a959cb1d24e046d43edaac51fe48b0498bb9ee3da7980532892ef1ff4a",
        "summary": "6274031bf91c13cc4b24ba02f98ab1935acf98828734ad7e7ba65a0c65ff409c",
        "params": "549a3f525efa0c22f454332e9314c7bd9d232d13fef6e4e67a3bf2bf52e123f9",
    },
    "client/plan/loop_engine": {
        "rounds": "bdb261a959cb1d24e046d43edaac51fe48b0498bb9ee3da7980532892ef1ff4a",
        "summary": "1eecca6daa07b5920b0cae023c002f606bdb6dcd5fef4c7115288dded361111c",
        "params": "549a3f525efa0c22f454332e9314c7bd9d232d13fef6e4e67a3bf2bf52e123f9",
    },
    "client/pfa/exact_sum": {
        "rounds": "65ad3bd82ec3fef9ddbdcd9ddce75709ea4a37bd9ae466db33b59a492512d337",
        "summary": "415be9114068f82a054c7926aa48ab6c3527426df236967dfaa3d88007051ba2",
        "params": "cf92a324d44cd42625a0216a6edf96604e0fdbfa3583b0ef5a3022fd749576ed",
    },
    "client/pfa/protocol": {
        "rounds": "65ad3bd82ec3fef9ddbdcd9ddce75709ea4a37bd9ae466db33b59a492512d337",
        "summary": "9b98f1397db86f67d36c70d84c71c2ac9d71b6478878ca5212d96ad7a5d7ce27",
        "params": "cf92a324d44cd42625a0216a6edf96604e0fdbfa3583b0ef5a3022fd749576ed",
    },
    "client/fedhdp/exact_sum": {
        "rounds": "dfcd9500b6961ae40c77eaea86ffbe007579f640417bd7179e4b7dc79ec11fc2",
        "summary": "b47eea24b78eb1d16b4b734248f11047846379cfe6aa4226c2d67dc431e2f47d",
        "params": "bea52096cd78d966b2509f1d0672a1632fb3a3844a39f51e58ca00bcd78da79e",
    },
    "client/plan/adaptive_clip/exact_sum": {
        "rounds": "fa712fc05d614c65059393f7ba8de58d29315a22751833a9f43d81a1d4639115",
        "summary": "4c47188dae9738e8bf21bd7b20b43e8a4cdc4243041eac70ec2352b2af7325da",
        "params": "3837c20c53538679ad6434375c18a960f960f2e1fe57e8020f3b059f64c8da0c",
    },
    "client/plan/adaptive_clip/protocol": {
        "rounds": "5fdad43877219be5a7e670c6f7f49d76d59a0960ff7a7f94cde6a263bde96de1",
        "summary": "606abb8cb5a3146c20e1e329a6327a4db644a248ef2ecd2ea88c7c51e50c6155",
        "params": "bb52e6737e2fa0b95afe6095a9cd44e9ad7d0b55f96efa52341c287f986ba56e",
    },
    "client/fedhdp/adaptive_clip/exact_sum": {
        "rounds": "0bf069dfaa8d2bdbad09fc3660aa9e4471f850b7cf395b10f092ca1ddf3d1904",
        "summary": "da9340401c5c74ec6d25a3b42aa622e48a010032f5037385e9269f91f6081274",
        "params": "05d4a334f4c3b95cc1bd94769d0797b2caedbd2f8b6bd4ad6c7cf7ecf6b75ed3",
    },
    "silo/mrmtl": {
        "rounds": "75c66859e555e9e1a8a0bd09be7974f739ebd919cce3b7239289aa4483e31e66",
        "summary": "d16c3ed04907a8a1cc0f79597f7e0c923b709d66161eac808c54f566d7608754",
        "params": "0332e2dd23f4df5047bdbc48c78d00628e07acc5899a68f31a650bace56226f3",
    },
    "silo/local": {
        "rounds": "b52a5fadd77b39f4e19a411bd7f4f21c45fab15d7642b9f7f962899208f26ad9",
        "summary": "922acbc9cead31b39a9f9b727cb92a2bce471fabdf040ac8e53b835c45b778bc",
        "params": "55a92d961b3cbe0888c4b2dc503a4f878efe5bb3682d03c4a7f230b2e390ace6",
    },
    "silo/fedavg": {
        "rounds": "d90bb6f4426b917f17875bd7ab7ba74b76ba841ce157fcd53f5c59b860ce45c5",
        "summary": "ae071eea7a42bcea291d3558f5db62f24741d622bf1913b14e820f6f801845ca",
        "params": "09dc7782bcc788e63c53d9c9c12ff60baa52164235646c9b1e5d2d4b08d81f78",
    },
    "silo/finetune": {
        "rounds": "3bac722368e574c3bf4c2f28880e2bc6e2b673ecc9746475fb5280cd28a1dfa5",
        "summary": "2007638fea644db366a6f559e73c6d50eee527f372d1ec3105d1b6f587c78f32",
        "params": "4a53bd63612827b48b09f0effd68926555679c9dfe389d043ebb8c29568b57b3",
    },
    "silo/ditto": {
        "rounds": "9fab9764c3a54c5d3dd3d64c64044649014605aca8f3ca64094244e2781a42ee",
        "summary": "a2c59c40228a77e9a0809c6e1ee86f3dd72614c879f6c6fbac4568063a688bce",
        "params": "1906a21253e93a8004979b2e0037fd2396595f431797e6a0e98f83d6b42b0df4",
    },
    "silo/ifca_mrmtl": {
        "rounds": "a925d19cfeff0224affbff8f7c6ee5d1428a1969cb4dbeec02d0770b6d710613",
        "summary": "693e4e48a0c9423970c3b1d91d15b3cea89d624683a32ffa7dae5018ad636ffc",
        "params": "17004fa9e96a4938f4a7778c03b63465a69e78d169475e57568fc8827b7912de",
    },
    "silo/mrmtl/hidden_layer": {
        "rounds": "2b9d8c6ae0ec19798c1b034cd65353c7bfb9e6ba2416ea69dec9d41ef68da0f5",
        "summary": "abba9ab4bd8d12ce9d8fa4306ea9df7b9f471fbd3a16de14c8db222ed9746f7f",
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
    assert run_digest(SCENARIOS[name](tmp_path / "run")) == EXPECTED[name]


def test_every_unit_and_execution_mode_has_a_default_scenario() -> None:
    """The set covers each privacy unit, each silo method, each registered strategy and
    both secure-aggregation execution modes."""
    from planner.units.silo_sample import SILO_METHODS
    from trainer.strategies.registry import STRATEGIES

    quick = list(SCENARIOS)
    assert {name.split("/")[0] for name in quick} == {"client", "silo", "metric"}
    assert {name.split("/")[1] for name in quick if name.startswith("silo/")} == set(SILO_METHODS)
    assert {name.split("/")[1] for name in quick if not name.startswith("silo/")} == set(STRATEGIES)
    assert {"protocol", "exact_sum"} <= {part for name in quick for part in name.split("/")}
    assert set(EXPECTED) == set(SCENARIOS)

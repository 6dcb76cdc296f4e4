"""The discrete mechanism in the client unit's rounds (docs/secure-aggregation.md §Discrete noise,
"The trainer side"): the clients' Skellam shares through the real SecAgg/SecAgg+ protocol, the
ledger counting the plan's discrete event, and a stated block that is re-derived, never trusted."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from scipy import stats

from accounting import epsilon_of_events
from accounting.errors import InvalidInputError
from accounting.events import PoissonSampledSkellam
from planner.discrete import rounded_l1_bound, rounded_l2_bound
from planner.finalize import with_discrete
from planner.schema import Plan
from tests.trainer.test_rounds import make_engine
from tests.trainer.trainer_plans import hand_plan, quiet_progress
from trainer.secagg import discrete as dm
from trainer.strategies import RoundContext
from trainer.strategies.base import PURPOSE_ROTATION
from trainer.units.client.tally import ClientTally

DIM = 512  # a power of two: the released sum re-rotates to the integer sum exactly


def discrete_plan(dim: int = DIM, *, rounds: int = 40, dropout_rate: float = 0.3) -> Plan:
    """Two pools, one with two clip norms, stating their discrete blocks (report_discrete)."""
    plan = hand_plan(
        [("a", 3.0, 40, 0.5), ("b", 5.0, 30, 0.6), ("c", 6.0, 20, 0.5)],
        [("pa", ["a"], 1.0, 6, 1.0), ("pb", ["b", "c"], 0.8, 5, 1.0)],
        model_dim=dim,
        rounds=rounds,
        dropout_rate=dropout_rate,
        clip_norms={"c": 0.5},
    )
    asked = plan.model_copy(update={"scenario": plan.scenario.model_copy(update={"report_discrete": True})})
    stated = with_discrete(asked)
    assert all(pool.discrete is not None for pool in stated.pools), stated.warnings
    return stated


@pytest.fixture(scope="module")
def plan() -> Plan:
    return discrete_plan()


def released_integers(outcome, plan: Plan, pool_index: int, round_index: int, seed: int) -> np.ndarray:
    """The session's decoded integer sum, recovered from the released update sum: H D (sum * s)."""
    pool = plan.pools[pool_index]
    assert pool.discrete is not None
    signs = dm.rotation_signs(RoundContext(round_index, round_index, seed=seed).seed_for(PURPOSE_ROTATION, pool_index), DIM)
    rotated = dm.rotate(outcome.pool_sums[pool.id] * pool.discrete.scale, signs)
    integers = np.rint(rotated)
    assert np.max(np.abs(rotated - integers)) < 1e-6  # the decoding is exact
    return integers.astype(np.int64)


def skellam_chi_square(samples: list[tuple[np.ndarray, float]], bins: int = 24) -> float:
    """The chi-square p-value of integer samples, each array of Skellam(variance) (exact pmf per
    array), over bins of equal probability in standard units."""
    edges_z = stats.norm.ppf(np.linspace(0, 1, bins + 1)[1:-1])
    observed = np.zeros(bins)
    expected = np.zeros(bins)
    for values, variance in samples:
        law = stats.skellam(variance / 2.0, variance / 2.0)
        edges = np.floor(edges_z * math.sqrt(variance)).astype(np.int64)  # bin k: (edges[k-1], edges[k]]
        cdf = np.concatenate(([0.0], law.cdf(edges), [1.0]))
        expected += values.size * np.diff(cdf)
        observed += np.bincount(np.searchsorted(edges, values, side="left"), minlength=bins)
    return float(stats.chisquare(observed, expected).pvalue)


@pytest.mark.parametrize("graph", ["full", "sparse"])
def test_zero_update_rounds_through_the_protocol_release_skellam_of_the_survivors_shares(plan, graph):
    """Zero updates round and rotate to zero exactly, so each released integer sum is the
    survivors' shares alone: Skellam of variance |U3| v, whoever dropped before masking (their
    shares are not in it) or after (they are). Exact-pmf chi-square test per pool."""
    seed = 5
    engine = make_engine(plan, DIM, secagg_mode=graph, secagg_mechanism="skellam", late_dropout_fraction=0.5)
    samples: dict[str, list[tuple[np.ndarray, float]]] = {p.id: [] for p in plan.pools}
    sampled_instead: dict[str, list[tuple[np.ndarray, float]]] = {p.id: [] for p in plan.pools}
    dropped_early = 0
    for round_index in range(30):
        _, outcome = engine.run(RoundContext(round_index, round_index, seed=seed), torch.zeros(DIM))
        dropped_early += outcome.dropped_before_masking
        for index, pool in enumerate(plan.pools):
            assert pool.discrete is not None
            if outcome.pool_sums[pool.id] is None:
                continue
            integers = released_integers(outcome, plan, index, round_index, seed)
            survivors = outcome.survived[pool.id]
            sampled = sum(outcome.sampled[g] for g in pool.groups)
            samples[pool.id].append((integers, survivors * pool.discrete.share_variance))
            sampled_instead[pool.id].append((integers, sampled * pool.discrete.share_variance))
    assert dropped_early > 10 and outcome.secagg[plan.pools[0].id].startswith(graph)
    for pool in plan.pools:
        assert len(samples[pool.id]) >= 25
        assert skellam_chi_square(samples[pool.id]) > 1e-3, pool.id
        # the test has power: counting the early dropouts' shares too is rejected
        assert skellam_chi_square(sampled_instead[pool.id]) < 1e-6, pool.id


def test_exact_sum_releases_what_the_protocol_releases(plan):
    protocol = make_engine(plan, DIM, secagg_mechanism="skellam", late_dropout_fraction=0.5)
    simulated = make_engine(plan, DIM, secagg_mechanism="skellam", late_dropout_fraction=0.5, secagg_execution="exact_sum")
    update = torch.linspace(-0.2, 0.3, DIM)
    for round_index in range(3):
        ctx = RoundContext(round_index, round_index, seed=2)
        _, a = protocol.run(ctx, torch.zeros(DIM))
        _, b = simulated.run(ctx, torch.zeros(DIM))
        assert a.survived == b.survived
        for pool_id, total in a.pool_sums.items():
            other = b.pool_sums[pool_id]
            assert (total is None and other is None) or np.array_equal(total, other)
    # a non-zero update arrives: the released sum is its survivors' copies plus the noise
    engine = make_engine(plan, DIM, update, secagg_mechanism="skellam")
    _, outcome = engine.run(RoundContext(0, 0, seed=4), torch.zeros(DIM))
    pool = plan.pools[0]
    assert pool.discrete is not None
    n = outcome.survived[pool.id]
    clipped = update.numpy().astype(float) * min(1.0, 1.0 / float(torch.linalg.norm(update)))
    noise = outcome.pool_sums[pool.id] - n * clipped
    expected_std = math.sqrt(n * pool.discrete.share_variance) / pool.discrete.scale
    assert abs(float(np.std(noise)) / expected_std - 1) < 0.15


def test_the_ledger_counts_the_plans_discrete_event(plan):
    ledger = ClientTally(plan, mechanism="skellam")
    continuous = ClientTally(plan)
    for _ in range(7):
        ledger.record_round()
        continuous.record_round()
    pool = plan.pool("pb")
    block = pool.discrete
    assert block is not None
    delta = plan.scenario.delta - 7 * block.wrap_probability_per_round
    for group_id in ("b", "c"):
        group = plan.group(group_id)
        l2 = rounded_l2_bound(group.clip_norm, block.scale, block.dimension)
        event = PoissonSampledSkellam(sampling_rate=group.sampling_rate, variance=block.total_variance,
                                      l2_sensitivity=l2, l1_sensitivity=rounded_l1_bound(l2, block.dimension), steps=7)
        assert ledger.phases(group_id) == [event]
        expected = epsilon_of_events([event], delta=delta, accountant="rdp").epsilon
        assert ledger.final_spent()[group_id] == pytest.approx(expected, rel=1e-12)
        assert ledger.spent()[group_id] == pytest.approx(expected, rel=1e-12)
        assert ledger.final_spent()[group_id] != continuous.final_spent()[group_id]
    figures = ledger.final_figures()["c"]
    assert figures is not None and figures.rdp == pytest.approx(ledger.final_spent()["c"], rel=1e-12)
    # after the whole plan the binding group has spent exactly the block's epsilon
    for _ in range(plan.rounds - 7):
        ledger.record_round()
    binding = [g for g in ("b", "c") if rounded_l2_bound(plan.group(g).clip_norm, block.scale, block.dimension)
               == block.l2_sensitivity]
    assert ledger.final_spent()[binding[0]] == pytest.approx(block.epsilon, rel=1e-9)
    assert all(ledger.final_spent()[g] <= plan.scenario.group(g).epsilon for g in ("a", "b", "c"))


def test_a_stated_block_is_re_derived_never_trusted(plan):
    halved = plan.pools[0].discrete.model_copy(update={"share_variance": plan.pools[0].discrete.share_variance / 2})
    tampered = plan.model_copy(update={"pools": [plan.pools[0].model_copy(update={"discrete": halved}), plan.pools[1]]})
    with pytest.raises(InvalidInputError) as error:
        make_engine(tampered, DIM, secagg_mechanism="skellam")
    assert error.value.field == "pools.pa.discrete.share_variance" and "altered" in error.value.reason

    narrower = plan.pools[1].discrete.model_copy(update={"bits": plan.pools[1].discrete.bits - 2})
    tampered = plan.model_copy(update={"pools": [plan.pools[0], plan.pools[1].model_copy(update={"discrete": narrower})]})
    with pytest.raises(InvalidInputError) as error:
        make_engine(tampered, DIM, secagg_mechanism="skellam")
    assert error.value.field == "pools.pb.discrete.bits"

    missing = plan.model_copy(update={"pools": [plan.pools[0].model_copy(update={"discrete": None}), plan.pools[1]]})
    with pytest.raises(InvalidInputError) as error:
        make_engine(missing, DIM, secagg_mechanism="skellam")
    assert error.value.field == "pools.pa.discrete" and "gaussian_continuous" in error.value.reason
    with pytest.raises(InvalidInputError) as error:
        make_engine(missing, DIM)  # the default follows the plan: one block stated means skellam
    assert error.value.field == "pools.pa.discrete"
    make_engine(missing, DIM, secagg_mechanism="gaussian_continuous")  # the continuous path never reads the blocks

    with pytest.raises(InvalidInputError) as error:
        make_engine(plan, DIM * 2, secagg_mechanism="skellam")
    assert error.value.field == "model"
    with pytest.raises(InvalidInputError) as error:
        make_engine(plan, DIM, secagg_mechanism="laplace")
    assert error.value.field == "secagg_mechanism"


def test_a_block_of_another_calibration_runs_at_its_own_noise_only_within_the_budgets(plan):
    """A block whose noise differs from today's derivation (an earlier release's search stopped at
    another point of the budget) runs at its own noise when that noise is consistent and its
    Skellam events meet every member's budget: more noise than derived runs; less noise that
    overspends a budget is refused naming total_variance, whichever bit width it states."""
    noisier = with_noise(plan, 1.05)
    make_engine(noisier, DIM, secagg_mechanism="skellam")
    with pytest.raises(InvalidInputError) as error:
        make_engine(with_noise(plan, 0.9), DIM, secagg_mechanism="skellam")
    assert error.value.field == "pools.pa.discrete.total_variance" and "above its budget" in error.value.reason


def with_noise(plan: Plan, factor: float) -> Plan:
    """``plan`` with pool pa's block at ``factor`` times its noise (the bit width that noise needs):
    a block of another calibration than today's derivation."""
    from planner.discrete import bits_for, widest_clip

    block = plan.pools[0].discrete
    assert block is not None
    share = block.share_variance * factor
    bits, _ = bits_for(block.wrap_probability_per_round, block.max_clients, widest_clip(plan, plan.pools[0].id),
                       block.scale, block.dimension, share, block.count_factor)
    changed = block.model_copy(update={"share_variance": share, "total_variance": share * block.honest_survivors,
                                       "bits": bits})
    return plan.model_copy(update={"pools": [plan.pools[0].model_copy(update={"discrete": changed}), *plan.pools[1:]]})


def test_the_check_of_a_blocks_own_noise_reads_the_ledgers_verification_composed_for_the_plan(plan):
    """A block at its own noise needs each member's full-run Skellam ledger, which planner.verify's
    step 6 composed for the same plan before round 0: verify_executable(skellam_spent=) hands the
    figures over and discrete_pools(skellam_spent=) checks with them (docs/ledger.md §5), so a figure
    given is the one judged (one above the budget is refused naming total_variance, with that figure);
    a group without one is composed there, as for a caller that gives none (a Flower node)."""
    from planner.ledger import epsilon_spent
    from planner.verify import verify_executable
    from trainer.units.client.discrete import discrete_pools

    noisier = with_noise(plan, 1.05)
    figures: dict[str, float] = {}
    verify_executable(noisier, skellam_spent=figures)
    group = noisier.group("a")
    assert figures["a"] == epsilon_spent(noisier, group, noisier.rounds, mechanism="skellam")
    assert discrete_pools(noisier, DIM, skellam_spent=figures)["pa"].own_noise
    assert discrete_pools(noisier, DIM, skellam_spent={})["pa"].own_noise  # composed in the check
    assert group.epsilon is not None
    above = group.epsilon * 1.01
    with pytest.raises(InvalidInputError) as error:
        discrete_pools(noisier, DIM, skellam_spent={**figures, "a": above})
    assert error.value.field == "pools.pa.discrete.total_variance"
    assert f"spend epsilon {above:.10g}" in error.value.reason and "above its budget" in error.value.reason


def _linear_run(plan: Plan, tmp_path, name: str = "run", **options):
    """A 2-round run of a linear model on synthetic data (610 parameters), prepared and executed."""
    from trainer.data import load_dataset
    from trainer.runner import TrainConfig, execute_run, prepare_run

    dataset = load_dataset("synthetic", num_clients=plan.scenario.total_clients, seed=0)
    config = TrainConfig(dataset="synthetic", model="mlp", model_options={"hidden": []}, rounds=2, local_steps=1,
                         **options)
    prepared = prepare_run(plan, plan.model_dump(mode="json"), config, tmp_path / name, dataset=dataset)
    summary = execute_run(prepared, progress=quiet_progress(2))
    return prepared, summary, json.loads((tmp_path / name / "summary.json").read_text())


def test_the_default_mechanism_follows_the_plan():
    """``plan`` (the default) runs skellam on a plan whose noised pools state discrete blocks and
    the continuous shares on one without (a plan made before the discrete default); a mechanism
    named is run as named."""
    from trainer.run.config import TrainConfig
    from trainer.units.client.discrete import run_mechanism

    stated = discrete_plan(rounds=2)
    bare = stated.model_copy(update={"pools": [p.model_copy(update={"discrete": None}) for p in stated.pools]})
    assert TrainConfig(dataset="synthetic", model="mlp", rounds=1).secagg_mechanism == "plan"
    assert run_mechanism("plan", stated) == "skellam"
    assert run_mechanism("plan", bare) == "gaussian_continuous"
    assert run_mechanism("gaussian_continuous", stated) == "gaussian_continuous"
    assert run_mechanism("skellam", bare) == "skellam"  # refused by discrete_pools, naming the pool's field
    assert make_engine(stated, DIM).secagg_mechanism == "skellam"
    assert make_engine(bare, DIM).secagg_mechanism == "gaussian_continuous" and not make_engine(bare, DIM).discrete
    with pytest.raises(InvalidInputError) as error:
        make_engine(bare, DIM, secagg_mechanism="skellam")
    assert error.value.field == "pools.pa.discrete" and "states no discrete block" in error.value.reason


def test_the_trainer_and_the_service_refuse_skellam_without_a_block_in_one_text():
    """Issue 27: the trainer's refusal (``discrete_pools``, exit 2, field ``pools.<id>.discrete``) and the
    service's (``planner.ledger.check_mechanism``, HTTP 422, field ``secagg_mechanism``) of skellam on a
    plan whose noised pool states no block are one text, ``planner.ledger.missing_block_reason``."""
    from planner import ledger as plan_ledger

    stated = discrete_plan(rounds=2)
    bare = stated.model_copy(update={"pools": [p.model_copy(update={"discrete": None}) for p in stated.pools]})
    with pytest.raises(InvalidInputError) as trainer_error:
        make_engine(bare, DIM, secagg_mechanism="skellam")
    with pytest.raises(InvalidInputError) as service_error:
        plan_ledger.check_mechanism(bare, "skellam")
    assert (trainer_error.value.field, service_error.value.field) == ("pools.pa.discrete", "secagg_mechanism")
    assert trainer_error.value.reason == service_error.value.reason == plan_ledger.missing_block_reason("pa")
    for needle in ("pool pa states no discrete block", "secagg_mechanism: skellam", "gaussian_continuous"):
        assert needle in trainer_error.value.reason


def test_a_checkpoint_written_before_the_default_changed_keeps_its_configuration_fingerprint():
    """A run started before ``plan`` became the default recorded ``secagg_mechanism:
    gaussian_continuous`` (left out of its fingerprint as the default then); the same
    configuration, and a new run of the default on a plan without blocks (which records the
    mechanism it resolves to, gaussian_continuous), must fingerprint as it did, and a skellam
    run as its did. The values were computed by the code before the change."""
    from trainer.run.config import TrainConfig
    from trainer.run.directory import fingerprint

    def printed(mechanism: str) -> str:
        return fingerprint(TrainConfig(dataset="digits", model="mlp", rounds=3, secagg_mechanism=mechanism).fingerprint_data())

    before = "ff7d475f15310dac673a0ad01e7e5d0295e3ec516c084621aacc6f1cd924a5a7"
    assert printed("gaussian_continuous") == before and printed("plan") == before
    assert printed("skellam") == "d0255ae89e73ec7b0ec3da243c24d19d1788251937cb298324c000d6c4687a7c"


def test_a_run_on_the_plans_blocks_runs_skellam_by_default_and_the_continuous_one_by_request(tmp_path):
    plan = discrete_plan(dim=610, rounds=2, dropout_rate=0.1)  # the linear model: 60 x 10 + 10 parameters
    _, summary, written = _linear_run(plan, tmp_path)
    assert written["secagg_mechanism"] == "skellam" and summary.rounds_run == 2
    ledger = ClientTally(plan, mechanism="skellam")
    ledger.record_round()
    ledger.record_round()
    assert written["epsilon_spent"] == ledger.final_spent()
    # config.json records what the default resolved to: a resume runs the same mechanism
    assert json.loads((tmp_path / "run" / "config.json").read_text())["secagg_mechanism"] == "skellam"

    _, _, continuous = _linear_run(plan, tmp_path, "continuous", secagg_mechanism="gaussian_continuous")
    assert continuous["secagg_mechanism"] == "gaussian_continuous"
    assert any("approximate" in w and "gaussian_continuous" in w for w in continuous["warnings"])
    gaussian = ClientTally(plan)
    gaussian.record_round()
    gaussian.record_round()
    assert continuous["epsilon_spent"] == gaussian.final_spent() != written["epsilon_spent"]


def test_a_run_on_the_discrete_mechanism_records_it_and_is_reported(tmp_path):
    from trainer.data import load_dataset
    from trainer.runner import TrainConfig, execute_run, prepare_run

    plan = discrete_plan(dim=610, rounds=2, dropout_rate=0.1)  # the linear model below: 60 x 10 + 10 parameters
    dataset = load_dataset("synthetic", num_clients=plan.scenario.total_clients, seed=0)
    config = TrainConfig(dataset="synthetic", model="mlp", model_options={"hidden": []}, rounds=2, local_steps=1,
                         secagg_mechanism="skellam")
    prepared = prepare_run(plan, plan.model_dump(mode="json"), config, tmp_path / "run", dataset=dataset)
    summary = execute_run(prepared, progress=quiet_progress(2))
    written = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert written["secagg_mechanism"] == "skellam" and summary.rounds_run == 2
    ledger = ClientTally(plan, mechanism="skellam")
    ledger.record_round()
    ledger.record_round()
    assert written["epsilon_spent"] == ledger.final_spent()
    assert json.loads((tmp_path / "run" / "config.json").read_text())["secagg_mechanism"] == "skellam"

    # reported: the reports state skellam and the service counts it (tests/app/test_attached_discrete.py)
    assert prepared.unit.reporting_refusal(config) is None
    assert prepared.unit.reported_mechanism(config) == "skellam"


def test_the_console_names_the_mechanism_and_labels_the_continuous_one_approximate():
    from planner.schema import MECHANISM_LABELS
    from trainer.run.options import format_summary
    from trainer.run.summary import RunSummary

    base = dict(
        run_dir="r", method="gdpfed_plus", plan_id=None, complete=True, rounds_run=1, rounds=1, start_round=0,
        final_accuracy=None, final_loss=None, best_accuracy=None, epsilon_spent={}, epsilon_target={},
        aborted_rounds={}, model_dim=10, device="cpu", seconds=1.0, secagg_graphs={"P1": ["full"]},
    )
    continuous = format_summary(RunSummary(**base)).splitlines()
    assert f"noise mechanism: {MECHANISM_LABELS['gaussian_continuous']}" in continuous
    assert "approximate" in MECHANISM_LABELS["gaussian_continuous"]
    assert "secagg_mechanism" not in RunSummary(**base).model_dump_json()  # the continuous summaries keep their bytes
    discrete = format_summary(RunSummary(**base, secagg_mechanism="skellam")).splitlines()
    assert f"noise mechanism: {MECHANISM_LABELS['skellam']}" in discrete


def test_the_bit_width_the_clients_encode_with_covers_every_group_of_the_pool():
    """idp_scale gives a pool's groups their own clip norms: the clients of every group encode
    with a b whose wrap-around bound at that group's C_g is the per-round bound the ledger
    charges to delta (run_delta), not only the binding group's."""
    from planner import load_scenario, make_plan
    from planner.discrete import run_delta, wrap_probability
    from trainer.units.client.discrete import discrete_pools

    scenario = load_scenario({
        "groups": [{"id": "strict", "epsilon": 1.0, "num_clients": 300}, {"id": "relaxed", "epsilon": 4.0, "num_clients": 300}],
        "delta": 1e-4, "rounds": 50, "model_dim": 1000, "expected_clients": 60, "min_clients_per_pool": 1,
        "report_discrete": True,
    })
    plan = make_plan(scenario, "idp_scale")
    (pool,) = discrete_pools(plan, 1000).values()
    block = pool.mechanism
    assert len({plan.group(g).clip_norm for g in pool.group_params}) == 2
    for group_id, params in pool.group_params.items():
        group = plan.group(group_id)
        chance = wrap_probability(params.bits, block.max_clients, group.clip_norm, block.scale, block.dimension,
                                  block.share_variance)
        assert chance <= block.wrap_probability_per_round, group_id
        assert run_delta(plan, group, 3) == plan.scenario.delta - 3 * block.wrap_probability_per_round


def test_a_tally_that_follows_a_re_plan_keeps_counting_the_discrete_mechanism(plan):
    # the engine keeps running Skellam shares after a re-plan, so the tally must keep
    # charging the wrap-around share of delta (reviewer F3; the service refuses re-plans of a
    # discrete run, tests/app/test_attached_discrete.py)
    tally = ClientTally(plan, mechanism="skellam")
    assert tally.continued(plan, None).mechanism == "skellam"



class FollowingReporter:
    """The service's side of a run, as far as following a re-plan goes: the claim of round
    ``at`` names the successor ``document`` (a 409), every report is accepted."""

    def __init__(self, plan_id: str, at: int, document: dict) -> None:
        from types import SimpleNamespace

        self.plan_id, self.at, self.document = plan_id, at, document
        self.link = SimpleNamespace(url="http://testserver", fetch_plan=lambda plan_id: document)
        self.pending: list = []
        self.completed: list[int] = []
        # the run identity every reporter states (RoundReporter.run_id, docs/ledger.md §4)
        self.run_id = "following-run"

    def claim(self, round_index: int):
        from trainer.run.reporting import Superseded

        if round_index == self.at and self.plan_id != self.document["id"]:
            return Superseded(plan_id=self.document["id"], start_round=self.at)
        return None

    def complete(self, round_index, aborted_pools, metrics, participants=None) -> None:
        self.completed.append(round_index)

    def flush(self) -> None:
        pass

    def state_dict(self) -> dict:
        return {"plan_id": self.plan_id, "pending": []}

    def load_state_dict(self, state: dict) -> None:
        pass


def skellam_events(plan: Plan, group_id: str, steps: int):
    """Independently of the ledger: ``steps`` rounds of the group's pool block at its own clip norm."""
    from accounting.events import PoissonSampledSkellam
    from planner.discrete import rounded_l1_bound, rounded_l2_bound

    group = plan.group(group_id)
    block = plan.pool(group.pool).discrete
    if block is None or group.sampling_rate == 0:
        return [], 0.0
    l2 = rounded_l2_bound(group.clip_norm, block.scale, block.dimension)
    event = PoissonSampledSkellam(sampling_rate=group.sampling_rate, variance=block.share_variance * block.honest_survivors,
                                  l2_sensitivity=l2, l1_sensitivity=rounded_l1_bound(l2, block.dimension), steps=steps)
    return [event], steps * block.wrap_probability_per_round


@pytest.mark.parametrize("change", [{"groups": [{"id": "a", "epsilon": 12.0}]},  # a budget raised
                                    {"groups": [{"id": "c", "epsilon": 5.5}]}],  # a budget lowered (from 6)
                         ids=["raised", "lowered"])
def test_a_skellam_run_follows_a_re_plan_on_its_discrete_blocks(tmp_path, monkeypatch, change):
    """The re-plan after round 0 records the run's Skellam events and calibrates its discrete
    blocks on them (docs/planning.md §9): the run switches at round 1 and runs the successor's
    blocks, and its ledger is the Skellam events of both plans composed, at delta less both
    plans' wrap-around charges, as recomputed here from the blocks; each group's composed
    epsilon under the successor's blocks is within its new budget."""
    import accounting
    from planner.ledger import ledger_accountant
    from planner.replan import replan
    from tests.trainer.trainer_plans import quiet_progress
    from trainer.data import load_dataset
    from trainer.run.unit import TrainingUnit
    from trainer.runner import TrainConfig, execute_run, prepare_run

    plan = discrete_plan(dim=610, rounds=4, dropout_rate=0.1)
    successor = replan(plan, 1, change, parent_plan_id="parent")
    assert all(pool.discrete is not None for pool in successor.pools if pool.noise_multiplier > 0), successor.warnings
    document = {**successor.model_dump(mode="json"), "id": "successor"}
    dataset = load_dataset("synthetic", num_clients=plan.scenario.total_clients, seed=0)
    config = TrainConfig(dataset="synthetic", model="mlp", model_options={"hidden": []}, rounds=4, local_steps=1)
    prepared = prepare_run(plan, plan.model_dump(mode="json"), config, tmp_path / "run", dataset=dataset)
    # the service's ledger of a skellam run is another branch's work; the run's side is tested here
    monkeypatch.setattr(TrainingUnit, "reporting_refusal", lambda self, config=None: None)
    reporter = FollowingReporter("parent", 1, document)
    summary = execute_run(prepared, reporter=reporter, plan_id="parent", progress=quiet_progress(4))  # type: ignore[arg-type]

    assert summary.complete and summary.superseded_plans == ["parent"] and summary.plan_id == "successor"
    assert reporter.completed == [0, 1, 2, 3]
    assert prepared.plan.start_round == 1 and prepared.plan.pools == successor.pools
    assert {p: d.mechanism for p, d in prepared.engine.discrete.items()} == {
        p.id: p.discrete for p in successor.pools if p.discrete is not None}
    accountant = ledger_accountant(plan.accountant)
    for group in successor.groups:
        before, spent_wrap = skellam_events(plan, group.id, 1)
        after, wrap = skellam_events(successor, group.id, 3)
        delta = plan.scenario.delta - spent_wrap - wrap
        expected = accounting.epsilon_of_events([*before, *after], delta, accountant).epsilon if before or after else 0.0
        assert summary.epsilon_spent[group.id] == pytest.approx(expected, rel=1e-9), group.id
        if after:  # the successor's calibration meets the new budget over the whole history
            assert expected <= successor.scenario.group(group.id).epsilon * (1 + 1e-9), group.id
            planned, _ = skellam_events(successor, group.id, successor.rounds)
            composed = accounting.epsilon_of_events([*before, *planned], plan.scenario.delta - spent_wrap
                                                    - successor.pool(group.pool).discrete.wrap_probability_run,
                                                    accountant).epsilon
            assert composed <= successor.scenario.group(group.id).epsilon * (1 + 1e-9), group.id


def _prepared_after_round_0(tmp_path, engine_factory=None):
    """A 4-round skellam plan's run prepared in ``tmp_path / "run"`` (with ``engine_factory``, if
    given) and its tally after round 0: where the switch_plan tests below switch to a re-plan (the
    plan, the prepared run, the tally)."""
    from trainer.data import load_dataset
    from trainer.runner import TrainConfig, prepare_run

    plan = discrete_plan(dim=610, rounds=4, dropout_rate=0.1)
    dataset = load_dataset("synthetic", num_clients=plan.scenario.total_clients, seed=0)
    config = TrainConfig(dataset="synthetic", model="mlp", model_options={"hidden": []}, rounds=4, local_steps=1)
    prepared = prepare_run(plan, plan.model_dump(mode="json"), config, tmp_path / "run", dataset=dataset,
                           engine_factory=engine_factory)
    tally = prepared.unit.steps.open_tally(prepared, None)
    tally.record_round()
    return plan, prepared, tally


def test_a_skellam_run_stops_at_a_re_plan_without_discrete_blocks(tmp_path):
    """A successor that states no discrete block (here: its blocks taken off) cannot be followed
    by a skellam run: switching to the continuous shares would compose its budgets with a
    record of another mechanism."""
    from planner.ledger import missing_block_reason
    from planner.replan import replan
    from trainer.run.replan import switch_plan
    from trainer.run.reporting import ReportingStoppedError

    plan, prepared, tally = _prepared_after_round_0(tmp_path)
    successor = replan(plan, 1, {}, parent_plan_id="parent")
    bare = successor.model_copy(update={"pools": [p.model_copy(update={"discrete": None}) for p in successor.pools]})
    with pytest.raises(ReportingStoppedError) as stopped:
        switch_plan(prepared, tally, {**bare.model_dump(mode="json"), "id": "successor"}, 1)
    message = str(stopped.value)
    # the one text of that refusal (planner.ledger.missing_block_reason), as the service's and discrete_pools'
    assert "cannot follow the re-plan successor" in message and missing_block_reason(bare.pools[0].id) in message
    assert prepared.plan is plan  # the run stays on its plan: nothing switched


def test_a_followed_re_plans_block_is_checked_with_the_ledgers_its_verification_composed(tmp_path, monkeypatch):
    """A re-plan whose block is an earlier calibration's (here: more noise than today's derivation,
    as a service of another release may state) is verified when the run switches to it (planner.verify's
    step 6 composes each member's full-run Skellam ledger) and its engine checks the block at its own
    noise with the same ledgers: TrainingUnit.verify hands them to the engine factory, so each is
    composed once (twice before; trainer.run.replan.switch_plan, docs/ledger.md §5)."""
    from planner import ledger as plan_ledger
    from planner.calibration import history_key
    from planner.replan import replan
    from planner.schema import Changes
    from trainer.run.replan import switch_plan
    from trainer.units.client.rounds import RoundEngine

    plan, prepared, tally = _prepared_after_round_0(tmp_path)
    successor = with_noise(replan(plan, 1, Changes(), parent_plan_id="parent"), 1.05)
    members = successor.pools[0].groups
    full_run = {history_key(plan_ledger.run_history(successor, successor.group(g), successor.rounds, "skellam")): g
                for g in members}
    counts = dict.fromkeys(members, 0)
    compose = plan_ledger.default_epsilon_fn

    def counted(events, delta, accountant):
        group = full_run.get(history_key(events))
        if group is not None:
            counts[group] += 1
        return compose(events, delta, accountant)

    monkeypatch.setattr(plan_ledger, "default_epsilon_fn", counted)
    switch_plan(prepared, tally, {**successor.model_dump(mode="json"), "id": "successor"}, 1)
    assert isinstance(prepared.engine, RoundEngine)
    assert prepared.engine.discrete[successor.pools[0].id].own_noise  # checked at its own noise
    assert counts == dict.fromkeys(members, 1), counts


def test_a_re_plan_is_followed_with_an_engine_factory_of_the_previous_release(tmp_path):
    """A factory without ``verified=`` (the previous release's six positional arguments) builds the
    re-plan's engine too (trainer.run.prepared.as_engine_factory, called by switch_plan): the engine
    composes the successor's full-run ledgers itself and still checks the earlier calibration's
    block at its own noise (a TypeError traceback before)."""
    from planner.replan import replan
    from planner.schema import Changes
    from trainer.run.replan import switch_plan
    from trainer.units.client.rounds import RoundEngine
    from trainer.units.client.run import build_engine

    built = []

    def previous_release(plan, strategy, population, dim, config, rounds):
        built.append((plan.start_round, rounds))
        return build_engine(plan, strategy, population, dim, config, rounds)

    plan, prepared, tally = _prepared_after_round_0(tmp_path, previous_release)
    # as it is, not prepare_run's adapted copy: a caller may set its own after prepare_run, as the
    # Flower scale-out's silo and metric runs do
    prepared.engine_factory = previous_release
    successor = with_noise(replan(plan, 1, Changes(), parent_plan_id="parent"), 1.05)
    switch_plan(prepared, tally, {**successor.model_dump(mode="json"), "id": "successor"}, 1)
    assert built == [(0, 4), (1, 3)]
    assert isinstance(prepared.engine, RoundEngine) and prepared.plan.pools == successor.pools
    assert prepared.engine.discrete[successor.pools[0].id].own_noise  # checked at its own noise


def test_a_followed_re_plan_is_checked_by_the_client_units_own_verifier(tmp_path, monkeypatch):
    """The run's check of a re-plan it follows (TrainingUnit.verify, which also keeps the figures it
    composed for the successor's engine) is the planner's client unit verifier, the one gdpfed plan
    verify runs (planner.units.client.verify_client_plan), not a second copy of it: a refusal that
    verifier makes (here: a stand-in for a check it gains) stops the switch, the run stays on its plan."""
    import planner.units.client as client_unit
    from accounting.errors import InvalidInputError
    from planner.replan import replan
    from planner.schema import Changes
    from trainer.run.replan import switch_plan
    from trainer.run.reporting import ReportingStoppedError

    plan, prepared, tally = _prepared_after_round_0(tmp_path)
    successor = replan(plan, 1, Changes(), parent_plan_id="parent")

    def refusing(checked, **_kwargs):
        raise InvalidInputError("groups.a", "refused by the client unit's verifier")

    monkeypatch.setattr(client_unit, "verify_executable", refusing)
    with pytest.raises(ReportingStoppedError, match="refused by the client unit's verifier"):
        switch_plan(prepared, tally, {**successor.model_dump(mode="json"), "id": "successor"}, 1)
    assert prepared.plan is plan


def test_a_skellam_run_that_followed_a_re_plan_resumes_on_it(tmp_path, monkeypatch):
    """Interrupted after round 2 (on the re-plan since round 1) and resumed: the checkpoint's
    ledger (both plans' Skellam events) loads into the tally rebuilt on the re-plan, and the
    run ends with the uninterrupted run's figures and parameters."""
    from planner.replan import replan
    from tests.trainer.test_reporting import BetweenRounds
    from tests.trainer.trainer_plans import quiet_progress
    from trainer.data import load_dataset
    from trainer.run.checkpoint import load_checkpoint
    from trainer.run.unit import TrainingUnit
    from trainer.runner import TrainConfig, execute_run, prepare_run

    plan = discrete_plan(dim=610, rounds=4, dropout_rate=0.1)
    successor = replan(plan, 1, {"groups": [{"id": "a", "epsilon": 12.0}]}, parent_plan_id="parent")
    document = {**successor.model_dump(mode="json"), "id": "successor"}
    dataset = load_dataset("synthetic", num_clients=plan.scenario.total_clients, seed=0)
    config = TrainConfig(dataset="synthetic", model="mlp", model_options={"hidden": []}, rounds=4, local_steps=1)
    monkeypatch.setattr(TrainingUnit, "reporting_refusal", lambda self, config=None: None)

    def run(out, reporter, progress, resume=False):
        prepared = prepare_run(plan, plan.model_dump(mode="json"), config, out, dataset=dataset, resume=resume)
        return execute_run(prepared, reporter=reporter, plan_id="parent", progress=progress)  # type: ignore[arg-type]

    whole = run(tmp_path / "whole", FollowingReporter("parent", 1, document), quiet_progress(4))

    def interrupt() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "run", FollowingReporter("parent", 1, document), BetweenRounds(4, {2: interrupt}))
    state = load_checkpoint(tmp_path / "run" / "checkpoint.pt")
    assert state["next_round"] == 3 and state["current_plan"]["id"] == "successor"
    resumed = run(tmp_path / "run", FollowingReporter("successor", 1, document), quiet_progress(4), resume=True)
    assert resumed.complete and resumed.epsilon_spent == whole.epsilon_spent
    assert all(whole.epsilon_spent[g.id] > 0 for g in successor.groups)
    import torch

    assert torch.equal(load_checkpoint(tmp_path / "run" / "checkpoint.pt")["global_params"],
                       load_checkpoint(tmp_path / "whole" / "checkpoint.pt")["global_params"])


def test_a_model_smaller_than_the_plans_model_dim_runs_skellam_on_the_blocks_events(tmp_path):
    """The linear model (610 parameters, d' 1024) on a plan calibrated for 5000 coordinates (d'
    8192): its updates are zero-padded to the block's dimension, so the run completes on the
    skellam mechanism and its ledger is the plan's blocks' events, unchanged
    (docs/secure-aggregation.md §Discrete noise, "A model smaller than the plan's model_dim")."""
    plan = discrete_plan(dim=5000, rounds=2, dropout_rate=0.1)
    _, summary, written = _linear_run(plan, tmp_path)
    assert written["secagg_mechanism"] == "skellam" and summary.rounds_run == 2
    ledger = ClientTally(plan, mechanism="skellam")
    ledger.record_round()
    ledger.record_round()
    assert written["epsilon_spent"] == ledger.final_spent()


@pytest.mark.parametrize("counted", [False, True])
def test_a_smaller_models_padded_shares_decode_to_its_clipped_sum(counted):
    """Without noise, the shares of a model smaller than the block (zero-padded to the block's
    dimension, rotated at its d') decode to the clients' clipped update sum to the rounding, the
    padding's coordinates dropped; adaptive clipping's count coordinate stays last and exact."""
    from dataclasses import replace

    from planner.discrete import padded_dimension
    from trainer.units.client.discrete import DiscretePool, discrete_pools

    if counted:
        from tests.trainer.test_adaptive_clip import adaptive_discrete_plan

        plan = adaptive_discrete_plan()
    else:
        plan = discrete_plan(dim=3000)
    block = plan.pools[0].discrete
    assert block is not None
    block_dim = block.dimension
    dim = 37  # d' 64, far below the block's
    assert padded_dimension(dim) < padded_dimension(block_dim)
    pool = discrete_pools(plan, dim)[plan.pools[0].id]
    group = plan.pools[0].groups[0]
    quiet = DiscretePool(pool.pool_id, pool.mechanism,
                         {g: replace(p, share_variance=0.0) for g, p in pool.group_params.items()}, pool.model_dim)
    assert all(p.padded_dimension == pool.mechanism.padded_dimension and p.l2_bound == pool.mechanism.l2_sensitivity
               for g, p in quiet.group_params.items() if plan.group(g).clip_norm == pool.mechanism.clip_norm)
    rng = np.random.default_rng(3)
    signs = quiet.signs(9)
    assert signs.shape == (pool.mechanism.padded_dimension,)
    clip = plan.group(group).clip_norm
    norms = np.array([0.2, 0.7, 1.5, 3.0]) * clip
    updates = rng.standard_normal((norms.size, dim))
    updates *= (norms / np.linalg.norm(updates, axis=1))[:, None]
    shares = np.stack([quiet.share(u, group, signs, rng, clip if counted else None) for u in updates])
    assert shares.shape == quiet.absent()[None, :].repeat(norms.size, axis=0).shape
    released = quiet.decode(dm.modular_sum(shares, quiet.bits), signs, clip if counted else None)
    update = released[:-1] if counted else released
    assert update.shape == (dim,)
    if counted:
        assert released[-1] == float(np.sum(np.where(norms <= clip, 0.5, -0.5)))
    clipped = dm.clip(updates, clip).sum(axis=0)
    rounding = norms.size * math.sqrt(pool.mechanism.padded_dimension) / pool.mechanism.scale
    assert np.linalg.norm(update - clipped) <= rounding
    assert np.linalg.norm(update - clipped) < 0.05 * np.linalg.norm(clipped)


def test_a_model_larger_than_the_block_is_refused_naming_model():
    plan = discrete_plan(dim=3000)  # d' 4096
    make_engine(plan, 300, secagg_mechanism="skellam")  # smaller: runs, zero-padded
    make_engine(plan, 4096, secagg_mechanism="skellam")  # the block's d': its bounds hold as calibrated
    with pytest.raises(InvalidInputError) as error:
        make_engine(plan, 4097, secagg_mechanism="skellam")
    assert error.value.field == "model"
    assert "4097 parameters" in error.value.reason and "calibrated for 3000" in error.value.reason

"""Runs: reproducible from the seed, resume == uninterrupted (model, strategy state, ledger, log)."""

from __future__ import annotations

import json

import pytest
import torch

from accounting.errors import InvalidInputError
from accounting.events import Phase
from tests.trainer.trainer_plans import comparable, hand_plan, interrupt_after, quiet_progress
from trainer import runner as runner_module
from trainer.data import load_dataset
from trainer.run import checkpoint as checkpoint_module
from trainer.run.checkpoint import load_checkpoint
from trainer.run.metrics import read_rounds
from trainer.run.progress import Progress
from trainer.runner import TrainConfig, execute_run, prepare_run
from trainer.units.client.tally import ClientTally

ROUNDS = 4


def phase_count_epsilon(phases, delta, accountant):
    """A stand-in accountant that exposes the exact phase list (q, sigma, steps) it saw."""
    return float(sum(p.steps * (1 + p.sampling_rate) * (1 + p.noise_multiplier) for p in phases))


@pytest.fixture(scope="module")
def plan():
    return hand_plan(
        [("strict", 1.0, 20, 0.5), ("loose", 4.0, 20, 0.6)],
        [("p_strict", ["strict"], 1.2, 4, 0.3), ("p_loose", ["loose"], 0.4, 4, 1.0)],
        rounds=ROUNDS,
        model_dim=2000,
        dropout_rate=0.1,
    )


@pytest.fixture(scope="module")
def digits(plan):
    return load_dataset("digits", num_clients=plan.scenario.total_clients, seed=0)


def config(**overrides):
    base = dict(
        dataset="digits", model="mlp", model_options={"hidden": [16]}, rounds=ROUNDS, local_steps=2, lr=0.1, batch_size=16,
        server_momentum=0.5, late_dropout_fraction=0.5, eval_every=2,
    )
    base.update(overrides)
    return TrainConfig(**base)


def run(plan, digits, out, *, resume=False, progress=None, cfg=None):
    prepared = prepare_run(plan, plan.model_dump(mode="json"), cfg or config(), out, resume=resume, dataset=digits)
    display = progress or quiet_progress(plan.rounds)
    return execute_run(prepared, progress=display, epsilon_fn=phase_count_epsilon)



def final_state(out):
    return load_checkpoint(out / "checkpoint.pt")


def test_same_seed_same_run_and_other_seed_differs(plan, digits, tmp_path):
    run(plan, digits, tmp_path / "a")
    run(plan, digits, tmp_path / "b")
    run(plan, digits, tmp_path / "c", cfg=config(seed=1))
    a, b, c = (final_state(tmp_path / name) for name in "abc")
    assert torch.equal(a["global_params"], b["global_params"])
    assert comparable(read_rounds(tmp_path / "a" / "rounds.jsonl")) == comparable(read_rounds(tmp_path / "b" / "rounds.jsonl"))
    assert not torch.equal(a["global_params"], c["global_params"])


def test_resume_after_interrupt_equals_uninterrupted(plan, digits, tmp_path):
    whole = run(plan, digits, tmp_path / "whole")
    with pytest.raises(KeyboardInterrupt):
        run(plan, digits, tmp_path / "split", progress=interrupt_after(ROUNDS, 2))
    partial = final_state(tmp_path / "split")
    assert partial["next_round"] == 2
    assert len(read_rounds(tmp_path / "split" / "rounds.jsonl")) == 2
    resumed = run(plan, digits, tmp_path / "split", resume=True)

    a, b = final_state(tmp_path / "whole"), final_state(tmp_path / "split")
    assert torch.equal(a["global_params"], b["global_params"])
    assert torch.equal(a["strategy"]["momentum"], b["strategy"]["momentum"])
    assert a["ledger"] == b["ledger"]
    assert a["ledger"]["rounds_run"] == ROUNDS
    assert comparable(read_rounds(tmp_path / "whole" / "rounds.jsonl")) == comparable(
        read_rounds(tmp_path / "split" / "rounds.jsonl")
    )
    assert resumed.epsilon_spent == whole.epsilon_spent
    assert resumed.final_accuracy == whole.final_accuracy


def test_crash_between_log_line_and_checkpoint_is_not_double_counted(plan, digits, tmp_path, monkeypatch):
    run(plan, digits, tmp_path / "whole")
    calls = {"n": 0}
    real_save = checkpoint_module.save_checkpoint

    def crashing_save(path, state):
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError("disk vanished")
        real_save(path, state)

    monkeypatch.setattr(runner_module, "save_checkpoint", crashing_save)
    with pytest.raises(OSError):
        run(plan, digits, tmp_path / "split")
    # Round 3 was logged but its checkpoint never landed.
    assert len(read_rounds(tmp_path / "split" / "rounds.jsonl")) == 3
    assert final_state(tmp_path / "split")["next_round"] == 2
    monkeypatch.setattr(runner_module, "save_checkpoint", real_save)
    run(plan, digits, tmp_path / "split", resume=True)
    logged = read_rounds(tmp_path / "split" / "rounds.jsonl")
    assert [r.round for r in logged] == list(range(ROUNDS))
    a, b = final_state(tmp_path / "whole"), final_state(tmp_path / "split")
    assert torch.equal(a["global_params"], b["global_params"])
    assert a["ledger"] == b["ledger"]


def test_resume_of_finished_run_changes_nothing(plan, digits, tmp_path):
    run(plan, digits, tmp_path / "r")
    before = final_state(tmp_path / "r")
    summary = run(plan, digits, tmp_path / "r", resume=True)
    after = final_state(tmp_path / "r")
    assert torch.equal(before["global_params"], after["global_params"])
    assert summary.complete and summary.rounds_run == ROUNDS
    assert len(read_rounds(tmp_path / "r" / "rounds.jsonl")) == ROUNDS


def test_ledger_counts_every_round_for_every_group_with_parent_history():
    history = Phase(sampling_rate=0.2, noise_multiplier=2.0, steps=5)
    current = Phase(sampling_rate=0.5, noise_multiplier=1.0, steps=3)
    plan = hand_plan(
        [("a", 1.0, 10, 0.5), ("same", 1.0, 10, 0.2), ("out", None, 10, 0.5), ("idle", 2.0, 10, 0.0)],
        [
            ("pa", ["a"], 1.0, 1, 1.0),
            ("psame", ["same"], 2.0, 1, 1.0),
            ("pout", ["out"], 0.0, 1, 1.0),
            ("pidle", ["idle"], 1.0, 1, 1.0),
        ],
        start_round=5,
        rounds=3,
    )
    plan.group("a").phases = [history, current]
    plan.group("a").spent_phase_count = 1
    same_current = Phase(sampling_rate=0.2, noise_multiplier=2.0, steps=3)
    plan.group("same").phases = [history, same_current]
    plan.group("same").spent_phase_count = 1
    plan.group("idle").phases = [history]
    plan.group("idle").spent_phase_count = 1
    ledger = ClientTally(plan, phase_count_epsilon)
    before = phase_count_epsilon([history], 0, "")
    assert ledger.spent() == {"a": before, "same": before, "out": None, "idle": before}
    for _ in range(3):
        ledger.record_round()
    assert ledger.phases("a") == [history, current]
    assert ledger.phases("same") == [history, same_current]
    assert ledger.phases("idle") == [history]
    assert ledger.spent()["out"] is None
    assert ledger.spent()["a"] == phase_count_epsilon([history, current], 0, "")
    restored = ClientTally(plan, phase_count_epsilon)
    restored.load_state_dict(json.loads(json.dumps(ledger.state_dict())))
    assert restored.spent() == ledger.spent()
    # A plan whose own phase is not what it runs is refused, never guessed.
    plan.group("a").phases = [history, current.model_copy(update={"steps": 4})]
    with pytest.raises(InvalidInputError, match="not the one it runs"):
        ClientTally(plan, phase_count_epsilon)
    plan.group("a").phases = [history]
    with pytest.raises(InvalidInputError, match="lists no phase"):
        ClientTally(plan, phase_count_epsilon)
    # A group once sampled without noise never claims a finite epsilon again.
    plan.group("a").phases = [history, current]
    plan.group("a").unprotected_rounds = 2
    assert ClientTally(plan, phase_count_epsilon).spent()["a"] is None


def test_run_directory_files(plan, digits, tmp_path):
    summary = run(plan, digits, tmp_path / "r")
    out = tmp_path / "r"
    for name in ("plan.json", "config.json", "rounds.jsonl", "summary.json", "checkpoint.pt", "accuracy.png", "loss.png",
                 "privacy.png"):
        assert (out / name).is_file(), name
    for name in ("accuracy.png", "loss.png", "privacy.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((out / "summary.json").read_text())["rounds_run"] == ROUNDS
    # both figures beside the figure of record, from planner.ledger (docs/ledger.md §3)
    from planner.ledger import figures_by_group

    written = json.loads((out / "summary.json").read_text())
    expected = figures_by_group(plan, ROUNDS)
    for group_id, figures in expected.items():
        assert figures is not None
        assert written["epsilon_rdp"][group_id] == figures.rdp
        assert written["epsilon_tight"][group_id] == figures.tight < figures.rdp
    records = read_rounds(out / "rounds.jsonl")
    assert [r.accuracy is not None for r in records] == [False, True, False, True]
    assert all(set(r.epsilon_spent) == {"strict", "loose"} for r in records)
    assert all(r.sampled["strict"] >= 0 and set(r.survived) == {"p_strict", "p_loose"} for r in records)
    assert summary.model_dim > 0 and not list(out.glob(".*.tmp"))
    # Which secure aggregation ran: the real protocol on the plan's (auto) graphs, in every file.
    assert summary.secagg_execution == "protocol" and json.loads((out / "config.json").read_text())["secagg_mode"] == "auto"
    assert summary.secagg_graphs == {"p_strict": ["full"], "p_loose": ["full"]}
    assert all(set(r.secagg) <= {"p_strict", "p_loose"} and set(r.secagg.values()) <= {"full"} for r in records)


def test_exact_sum_run_equals_the_protocol_run(plan, digits, tmp_path):
    """The simulation mode changes nothing a run records except which mode it says ran."""
    protocol = run(plan, digits, tmp_path / "p")
    simulated = run(plan, digits, tmp_path / "s", cfg=config(secagg_execution="exact_sum"))
    assert simulated.secagg_execution == "exact_sum" and simulated.final_loss == protocol.final_loss
    assert comparable(read_rounds(tmp_path / "s" / "rounds.jsonl")) == comparable(read_rounds(tmp_path / "p" / "rounds.jsonl"))
    assert torch.equal(final_state(tmp_path / "s")["global_params"], final_state(tmp_path / "p")["global_params"])


def test_an_engine_factory_of_the_previous_release_runs_and_keeps_the_ledger(plan, digits, tmp_path):
    """A factory written to the previous release's ``EngineFactory``, six positional arguments and
    no ``verified=`` (trainer.run.prepared.as_engine_factory), runs: its engine composes what the
    run's verification would have handed it, and the run is the default factory's run (a TypeError
    traceback from prepare_run before)."""
    from trainer.units.client.run import build_engine

    calls = []

    def previous_release(plan, strategy, population, dim, config, rounds):
        calls.append(rounds)
        return build_engine(plan, strategy, population, dim, config, rounds)

    cfg = config(secagg_execution="exact_sum")
    default = execute_run(prepare_run(plan, plan.model_dump(mode="json"), cfg, tmp_path / "default", dataset=digits),
                          progress=quiet_progress(ROUNDS), epsilon_fn=phase_count_epsilon)
    old = execute_run(prepare_run(plan, plan.model_dump(mode="json"), cfg, tmp_path / "old", dataset=digits,
                                  engine_factory=previous_release),
                      progress=quiet_progress(ROUNDS), epsilon_fn=phase_count_epsilon)
    assert calls == [ROUNDS]
    assert old.complete and old.epsilon_spent == default.epsilon_spent
    a, b = final_state(tmp_path / "default"), final_state(tmp_path / "old")
    assert a["ledger"] == b["ledger"] and a["ledger"]["rounds_run"] == ROUNDS
    assert torch.equal(a["global_params"], b["global_params"])


def test_an_engine_factory_gets_verified_only_when_it_takes_it():
    """``as_engine_factory`` passes ``verified=`` to a factory with a keyword of that name or
    ``**kwargs``, and nothing extra to one without, or to one whose signature cannot be read."""
    from trainer.run.prepared import as_engine_factory

    seen = []

    def keyword(*args, verified=None):
        seen.append(("keyword", len(args), verified))

    def any_keywords(*args, **kwargs):
        seen.append(("kwargs", len(args), kwargs))

    def positional(plan, strategy, population, dim, config, rounds):
        seen.append(("positional", 6, None))

    class Unreadable:
        __signature__ = "no signature"  # inspect.signature raises TypeError

        def __call__(self, *args, **kwargs):
            seen.append(("unreadable", len(args), kwargs))

    figures = {"a": 1.0}
    for factory in (keyword, any_keywords, positional, Unreadable()):
        as_engine_factory(factory)(None, None, None, 1, None, 2, verified=figures)  # type: ignore[arg-type]
    assert seen == [("keyword", 6, figures), ("kwargs", 6, {"verified": figures}), ("positional", 6, None),
                    ("unreadable", 6, {})]
    assert as_engine_factory(keyword) is keyword  # a factory of this release is called as it is


def test_progress_uses_a_bar_on_a_terminal_and_lines_otherwise():
    import io

    from trainer.run.metrics import RoundRecord

    record = RoundRecord(
        round=0, loss=0.5, accuracy=0.9, epsilon_spent={"a": 1.0, "b": None}, aborted_pools=["pb"],
        abort_reasons={"pb": "1 clients sampled, fewer than the threshold m_P=2"},
        sampled={"a": 3}, survived={"pa": 3}, dropped_before_masking=0, dropped_after_masking=0, seconds=0.1,
    )

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    lines = io.StringIO()
    plain = Progress(2, 0, stream=lines)
    plain.round_done(record)
    plain.close()
    # the console's round number is the files' global index (rounds.jsonl says round 0)
    assert lines.getvalue() == (
        "round 0 [1/2]  loss 0.5000  acc 0.9000  eps a=1  clients 3/3  "
        "ABORTED pb (1 clients sampled, fewer than the threshold m_P=2)  0.10s\n"
    )
    screen = Terminal()
    bar = Progress(2, 0, stream=screen)
    assert bar.use_bar
    bar.round_done(record)
    bar.close()
    assert "1/2" in screen.getvalue() and "round 0" not in screen.getvalue()
    assert "pool pb aborted: 1 clients sampled, fewer than the threshold m_P=2" in screen.getvalue()


def test_rounds_jsonl_keeps_each_aborted_pools_reason():
    """docs/trainer.md §Runs: aborted pools are listed with the reason (``abort_reasons``)."""
    from trainer.run.metrics import RoundRecord
    from trainer.run.outcome import RoundOutcome
    from trainer.run.records import round_record

    outcome = RoundOutcome(
        global_round=3, sampled={"a": 1}, survived={"pa": 0}, aborted_pools=["pa"],
        abort_reasons={"pa": "1 clients sampled, fewer than the threshold m_P=2"},
        dropped_before_masking=0, dropped_after_masking=0, timing={},
    )

    class Tally:  # what round_record reads of a RunTally
        privacy_unit = "client"

        def spent(self):
            return {"a": 0.5}

    record = round_record(outcome, Tally(), None, 0.1, {})
    line = json.loads(record.model_dump_json())
    assert line["aborted_pools"] == ["pa"]
    assert line["abort_reasons"] == {"pa": "1 clients sampled, fewer than the threshold m_P=2"}
    # a line written before the field existed still reads
    del line["abort_reasons"]
    assert RoundRecord.model_validate(line).abort_reasons == {}

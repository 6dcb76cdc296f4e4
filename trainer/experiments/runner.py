"""Run an experiment: expand the grid, skip finished cells, run the rest, write reports.

(docs/results.md §Runner.) Output directory:

- ``cells/<cell_id>.json``: one ``CellResult`` per finished cell, written atomically
  (temporary file + rename) after the cell ends. A cell whose file exists, is complete
  and carries the same fingerprint (the cell's full specification) is not run again:
  that is how an interrupted experiment resumes. ``--force`` re-runs the chosen cells.
- ``runs/<cell_id>/``: the trainer's run directory of each cell (rounds, plots, plan).
- ``results.csv``, ``results.md``, ``accuracy.png``: written from every finished cell of
  the grid at the end (see ``trainer.experiments.report``).

``jobs > 1`` runs cells in that many worker processes (spawned, so no forked torch state;
they end when this process does);
each cell's secure-aggregation sessions then fork at most ``max(1, cores // jobs)``
processes (``cell_secagg_workers``) unless the configuration sets ``secagg_workers``.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path

from pydantic import BaseModel, Field

from accounting.errors import InvalidInputError
from accounting.processes import die_with_parent
from trainer.experiments.cell import CellResult, run_cell
from trainer.experiments.config import CellSpec, SweepExperiment, TrainExperiment, expand_cells, load_experiment
from trainer.run.directory import check_creatable_directory


class ExperimentSummary(BaseModel):
    """What one invocation did."""

    experiment: str
    out: str
    cells: int = Field(description="cells in the grid (or selected with --only)")
    ran: list[str] = Field(description="cells run by this invocation")
    skipped: list[str] = Field(description="cells already complete, not re-run")
    files: list[str]
    seconds: float


def result_path(out: Path, cell: str) -> Path:
    return out / "cells" / f"{cell}.json"


def read_result(out: Path, spec: CellSpec) -> CellResult | None:
    """The cell's stored result if it is complete and for this exact specification."""
    path = result_path(out, spec.cell_id)
    if not path.exists():
        return None
    try:
        result = CellResult.model_validate_json(path.read_text(encoding="utf-8"))
    except ValueError:
        return None
    if not result.complete or result.fingerprint != spec.fingerprint():
        return None
    return result


def write_result(out: Path, result: CellResult) -> None:
    path = result_path(out, result.cell_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(result.model_dump_json(indent=2))
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)


def cell_secagg_workers(jobs: int) -> int | None:
    """The secure-aggregation processes of each cell when ``jobs`` cells run at once: the
    cores shared out, ``max(1, cores // jobs)``; ``None`` (automatic) for one at a time.
    Without it every cell's sessions would fork a process per core (docs/results.md §Runner)."""
    # start-up time: the secure-aggregation package loads only when cells run in parallel
    from trainer.secagg import parallel

    return None if jobs <= 1 else max(1, parallel.available_workers() // jobs)


def _work(spec_json: str, out: str, secagg_workers: int | None = None) -> str:
    """Worker entry (top level so it pickles): run one cell, store and return its result."""
    spec = CellSpec.model_validate_json(spec_json)
    result = run_cell(spec, Path(out), secagg_workers=secagg_workers)
    write_result(Path(out), result)
    return result.model_dump_json()


def run_experiment(
    config_path: str | Path,
    out: str | Path,
    *,
    jobs: int = 1,
    smoke: bool = False,
    only: list[str] | None = None,
    force: bool = False,
    log: Callable[[str], None] | None = None,
) -> ExperimentSummary:
    """Run (or resume) the experiment in ``config_path``, writing into ``out``."""
    # start-up time: the report (matplotlib) loads when the experiment writes it
    from trainer.experiments.report import write_reports, write_sweep

    if jobs < 1:
        raise InvalidInputError("jobs", f"must be at least 1, got {jobs}")
    say = log or (lambda text: sys.stderr.write(text + "\n"))
    started = time.perf_counter()
    experiment = load_experiment(config_path)
    out = Path(out)
    check_creatable_directory(out, "out")
    out.mkdir(parents=True, exist_ok=True)
    if isinstance(experiment, SweepExperiment):
        if only:
            raise InvalidInputError("only", "a sweep experiment has no cells")
        files = write_sweep(experiment, out, smoke=smoke)
        return ExperimentSummary(
            experiment=experiment.name, out=str(out), cells=0, ran=[], skipped=[],
            files=[str(f) for f in files], seconds=time.perf_counter() - started,
        )
    assert isinstance(experiment, TrainExperiment)
    cells = expand_cells(experiment, config_path, smoke=smoke)
    if only:
        known = {c.cell_id for c in cells}
        unknown = [c for c in only if c not in known]
        if unknown:
            raise InvalidInputError("only", f"no cell {unknown[0]!r} in {config_path}{' (smoke size)' if smoke else ''}")
        chosen = [c for c in cells if c.cell_id in set(only)]
    else:
        chosen = cells
    todo, skipped = [], []
    for spec in chosen:
        if not force and read_result(out, spec) is not None:
            skipped.append(spec.cell_id)
        else:
            todo.append(spec)
    say(f"{experiment.name}: {len(chosen)} cells, {len(skipped)} already done, {len(todo)} to run")
    ran: list[str] = []
    if jobs == 1 or len(todo) <= 1:
        for index, spec in enumerate(todo, 1):
            result = run_cell(spec, out)
            write_result(out, result)
            ran.append(spec.cell_id)
            say(_describe(index, len(todo), result))
    else:
        # A worker ends with this process, however it ends (a kill -9 runs no shutdown):
        # otherwise it would finish its cell, then wait for the next one forever. submit()
        # starts the workers from this thread, which outlives them (the death signal follows
        # the starting thread; docs/architecture.md §Processes).
        with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn"),
                                 initializer=die_with_parent, initargs=(os.getpid(),)) as pool:
            workers = cell_secagg_workers(jobs)
            futures = {pool.submit(_work, spec.model_dump_json(), str(out), workers): spec for spec in todo}
            for index, future in enumerate(as_completed(futures), 1):
                result = CellResult.model_validate_json(future.result())
                ran.append(result.cell_id)
                say(_describe(index, len(todo), result))
    results = [r for r in (read_result(out, spec) for spec in cells) if r is not None]
    files = write_reports(experiment, cells, results, out)
    return ExperimentSummary(
        experiment=experiment.name,
        out=str(out),
        cells=len(chosen),
        ran=ran,
        skipped=skipped,
        files=[str(f) for f in files],
        seconds=time.perf_counter() - started,
    )


def _describe(index: int, total: int, result: CellResult) -> str:
    if result.status != "ok":
        return f"[{index}/{total}] {result.cell_id}: {result.status} ({result.error})"
    score = "accuracy n/a" if result.final_accuracy is None else f"accuracy {result.final_accuracy:.4f}"
    if result.final_accuracy is None and result.final_rmse is not None:
        score = f"RMSE {result.final_rmse:.4f}"
    if result.metric_leakage_max is not None:  # a metric leakage, never an epsilon
        score += f", metric leakage median {result.metric_leakage_median:.4g} max {result.metric_leakage_max:.4g}"
    return f"[{index}/{total}] {result.cell_id}: {score} in {result.wall_seconds:.1f}s"


def load_results(out: Path) -> list[CellResult]:
    """Every stored cell result in ``out`` (for tools and tests)."""
    folder = Path(out) / "cells"
    return [CellResult.model_validate(json.loads(p.read_text())) for p in sorted(folder.glob("*.json"))]

"""PNG plots of a run (matplotlib, Agg backend; ``docs/trainer.md`` §Plots).

``accuracy.png`` and ``loss.png``: the test metric per evaluated round with the chance level
(the best input-independent predictor, ``chance_level``); ``privacy.png``: each group's
epsilon spent after every round against its budget (metric runs: the clients' median and
largest metric leakage, labelled as such); with local test data
``local_accuracy.png``: the per-group accuracy on the clients' own data. Each plot is built
as a ``Figure`` (inspectable) and then written.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer.run.directory import atomic_write_bytes
from trainer.run.metrics import RoundRecord

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@dataclass(frozen=True)
class ChanceLevel:
    """The best constant predictor on the test labels (docs/trainer.md §Plots).

    ``accuracy = max_c p_c`` (always answer the most frequent label) and ``loss = -sum_c
    p_c ln p_c`` (the cross-entropy of predicting the label frequencies ``p``, in nats, as
    the test loss is): a model that ignores its input can do no better on this test set.
    """

    accuracy: float
    loss: float
    # What the constant predictor is, for the legend (a silo run's is one per silo).
    accuracy_label: str = "most frequent label"
    loss_label: str = "label frequencies"


def chance_level(test_labels: Any, task: str) -> ChanceLevel | None:
    """``ChanceLevel`` of integer test labels; ``None`` for regression or an empty test set."""
    if task == "regression" or test_labels is None or len(test_labels) == 0:
        return None
    import numpy as np

    counts = np.bincount(np.asarray(test_labels, dtype=np.int64).reshape(-1))
    frequencies = counts[counts > 0] / counts.sum()
    return ChanceLevel(accuracy=float(frequencies.max()), loss=float(-(frequencies * np.log(frequencies)).sum()))


def chance_level_by_part(part_labels: Sequence[Any], task: str, part: str = "part") -> ChanceLevel | None:
    """The chance level of a test set evaluated in parts, each by its own model (a silo run:
    silo k's model on silo k's test split, metrics weighted by examples): each part's best
    constant predictor, ``accuracy = sum_k n_k max_c p_kc / n`` and ``loss = sum_k n_k H(p_k) / n``
    (docs/trainer.md §Plots). A model per part may learn its part's label frequencies without
    looking at any input, so this, not the pooled labels' level, is what it must beat.
    ``None`` for regression or no test examples."""
    levels = [(len(labels), chance_level(labels, task)) for labels in part_labels if len(labels) > 0]
    total = sum(n for n, _ in levels)
    if task == "regression" or total == 0:
        return None
    return ChanceLevel(
        accuracy=sum(n * level.accuracy for n, level in levels if level is not None) / total,
        loss=sum(n * level.loss for n, level in levels if level is not None) / total,
        accuracy_label=f"each {part}'s most frequent label, weighted by examples",
        loss_label=f"each {part}'s label frequencies, weighted by examples",
    )


SMOKE_MARK = "SMOKE SIZE: not a result"


def mark_smoke(figure: Any) -> None:
    """Write ``SMOKE_MARK`` across ``figure`` (docs/results.md §Runner): smoke cells are
    shrunk to run in seconds, and their plot must not pass for a result."""
    figure.text(0.5, 0.5, SMOKE_MARK, ha="center", va="center", rotation=20, fontsize=22,
                color="red", alpha=0.35, fontweight="bold", zorder=10)


def smoke_marked_figure(path: Path) -> Figure:
    """The PNG at ``path`` redrawn pixel for pixel with ``SMOKE_MARK`` across it."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.image import imread

    image = imread(path)
    height, width = image.shape[:2]
    figure = Figure(figsize=(width / 100, height / 100), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_axes((0.0, 0.0, 1.0, 1.0))
    axes.imshow(image)
    axes.set_axis_off()
    mark_smoke(figure)
    return figure


def mark_smoke_pngs(directory: Path) -> list[Path]:
    """Mark every plot a smoke-size run wrote in ``directory`` (its accuracy, loss, privacy
    plots): the per-cell plots of a smoke experiment must not pass for results either. The
    PNG also carries ``SMOKE_MARK`` as its Description text chunk. Returns the marked paths."""
    marked = []
    for path in sorted(directory.glob("*.png")):
        figure = smoke_marked_figure(path)
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", metadata={"Description": SMOKE_MARK})
        atomic_write_bytes(path, buffer.getvalue())
        marked.append(path)
    return marked


def _new_figure() -> tuple[Figure, Any]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6, 4), dpi=100)
    FigureCanvasAgg(figure)
    return figure, figure.add_subplot(1, 1, 1)


def _finish(figure: Figure, axes: Any, title: str, ylabel: str) -> None:
    from matplotlib.ticker import MaxNLocator

    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel("round (global index)")
    axes.set_ylabel(ylabel)
    axes.set_title(title)
    axes.grid(True, alpha=0.3)
    if axes.get_legend_handles_labels()[0]:
        axes.legend(fontsize="small")
    figure.tight_layout()


def save_png(figure: Figure, path: Path) -> None:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    atomic_write_bytes(path, buffer.getvalue())


def metric_figure(
    records: Sequence[RoundRecord], metric: str, title: str, chance: ChanceLevel | None = None
) -> Figure:
    """Line plot of ``metric`` (``accuracy`` or ``loss``) over the rounds that evaluated it,
    with a dashed horizontal line at ``chance``'s value of that metric."""
    figure, axes = _new_figure()
    points = [(r.round, getattr(r, metric)) for r in records if getattr(r, metric) is not None]
    if points:
        xs, ys = zip(*points)
        axes.plot(xs, ys, marker="o" if len(points) < 30 else None, label=f"test {metric}")
    else:
        axes.text(0.5, 0.5, "no evaluated rounds", ha="center", va="center", transform=axes.transAxes)
    if chance is not None:
        level = getattr(chance, metric)
        what = chance.accuracy_label if metric == "accuracy" else chance.loss_label
        axes.axhline(level, color="grey", linestyle="--", label=f"chance ({what}): {level:.3g}")
    _finish(figure, axes, title, metric)
    return figure


def plot_metric(
    records: Sequence[RoundRecord], metric: str, path: Path, title: str, chance: ChanceLevel | None = None
) -> None:
    save_png(metric_figure(records, metric, title, chance), path)


def notion_title(title: str, notion: str) -> str:
    """``title`` over the privacy ``notion``, wrapped at 55 characters: a notion can be long
    (a silo run's, a metric run's) and an unwrapped title is cut off at both sides."""
    import textwrap

    return f"{title}\n" + textwrap.fill(notion, 55)


def privacy_figure(
    records: Sequence[RoundRecord], budgets: Mapping[str, float | None], title: str, notion: str
) -> Figure | None:
    """Each group's epsilon spent after every round (solid) against its budget (dashed, same
    colour); groups without differential privacy are left out, and ``None`` is returned when
    no group has any. The title names ``notion``: figures of other notions never share it."""
    series: dict[str, list[tuple[int, float]]] = {}
    for record in records:
        for group, spent in record.epsilon_spent.items():
            if spent is not None and math.isfinite(spent):
                series.setdefault(group, []).append((record.round, spent))
    if not series:
        return None
    figure, axes = _new_figure()
    for group, points in series.items():
        xs, ys = zip(*points)
        (line,) = axes.plot(xs, ys, marker="o" if len(points) < 30 else None, label=f"{group}: spent")
        budget = budgets.get(group)
        if budget is not None:
            axes.axhline(budget, color=line.get_color(), linestyle="--", label=f"{group}: budget {budget:g}")
    _finish(figure, axes, notion_title(title, notion), "epsilon spent")
    return figure


def metric_leakage_figure(records: Sequence[RoundRecord], title: str, notion: str) -> Figure | None:
    """The median and largest metric leakage over clients after every round (the
    ``metric_leakage_*`` figures of a metric ledger, docs/metric-privacy.md §4); ``None``
    when no round has them. Its axis and title say leakage and ``notion``: never epsilon."""
    series: dict[str, list[tuple[int, float]]] = {}
    for record in records:
        for which in ("median", "max"):
            value = record.metrics.get(f"metric_leakage_{which}")
            if value is not None and math.isfinite(value):
                series.setdefault(which, []).append((record.round, value))
    if not series:
        return None
    figure, axes = _new_figure()
    for which, points in series.items():
        xs, ys = zip(*points)
        axes.plot(xs, ys, marker="o" if len(points) < 30 else None, label=f"{which} over clients")
    _finish(figure, axes, notion_title(title, notion), "metric leakage (n / nu per participation)")
    return figure


def local_accuracy_series(records: Sequence[RoundRecord]) -> dict[str, list[tuple[int, float]]]:
    """Line label -> (round, accuracy) points: ``global, <group>`` from ``accuracy_by_group``
    and ``personal, <group>`` from a strategy's ``personal_accuracy.<group>`` metrics."""
    series: dict[str, list[tuple[int, float]]] = {}
    for record in records:
        for group, value in record.accuracy_by_group.items():
            if value is not None:
                series.setdefault(f"global, {group}", []).append((record.round, value))
        for name, value in record.metrics.items():
            if name.startswith("personal_accuracy."):
                series.setdefault(f"personal, {name.split('.', 1)[1]}", []).append((record.round, value))
    return series


def plot_local_accuracy(records: Sequence[RoundRecord], path: Path, title: str) -> bool:
    """One line per ``local_accuracy_series`` entry; nothing is written (``False``) without any."""
    series = local_accuracy_series(records)
    if not series:
        return False
    figure, axes = _new_figure()
    for label, points in series.items():
        xs, ys = zip(*points)
        axes.plot(xs, ys, marker="o" if len(points) < 30 else None, label=label,
                  linestyle="--" if label.startswith("personal") else "-")
    _finish(figure, axes, title, "mean accuracy over the group's clients")
    save_png(figure, path)
    return True


def plot_run(
    records: Sequence[RoundRecord],
    accuracy_path: Path,
    loss_path: Path,
    label: str,
    local_path: Path | None = None,
    *,
    chance: ChanceLevel | None = None,
    privacy_path: Path | None = None,
    budgets: Mapping[str, float | None] | None = None,
    notion: str = "client-level (epsilon, delta)-DP per group",
) -> None:
    if any(r.accuracy is not None for r in records):  # regression runs have none: no empty plot
        plot_metric(records, "accuracy", accuracy_path, f"test accuracy ({label})", chance)
    plot_metric(records, "loss", loss_path, f"test loss ({label})", chance)
    if local_path is not None:
        plot_local_accuracy(records, local_path, f"accuracy on the clients' own test data ({label})")
    if privacy_path is not None:
        figure = privacy_figure(records, budgets or {}, f"privacy spent against budget ({label})", notion)
        if figure is None:  # a metric ledger's runs spend leakage, not epsilon
            figure = metric_leakage_figure(records, f"metric leakage per client ({label})", notion)
        if figure is not None:
            save_png(figure, privacy_path)

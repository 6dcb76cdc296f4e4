"""PNG plots of a run: test accuracy and test loss per round, and with local test data the
per-group accuracy on the clients' own data (matplotlib, Agg backend)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from trainer.run.directory import atomic_write_bytes
from trainer.run.metrics import RoundRecord


def plot_metric(records: Sequence[RoundRecord], metric: str, path: Path, title: str) -> None:
    """Line plot of ``metric`` (``accuracy`` or ``loss``) over the rounds that evaluated it."""
    import io

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    points = [(r.round, getattr(r, metric)) for r in records if getattr(r, metric) is not None]
    figure = Figure(figsize=(6, 4), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot(1, 1, 1)
    if points:
        xs, ys = zip(*points)
        axes.plot(xs, ys, marker="o" if len(points) < 30 else None)
    else:
        axes.text(0.5, 0.5, "no evaluated rounds", ha="center", va="center", transform=axes.transAxes)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel("round (global index)")
    axes.set_ylabel(metric)
    axes.set_title(title)
    axes.grid(True, alpha=0.3)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    atomic_write_bytes(path, buffer.getvalue())


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
    import io

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    series = local_accuracy_series(records)
    if not series:
        return False
    figure = Figure(figsize=(6, 4), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot(1, 1, 1)
    for label, points in series.items():
        xs, ys = zip(*points)
        axes.plot(xs, ys, marker="o" if len(points) < 30 else None, label=label,
                  linestyle="--" if label.startswith("personal") else "-")
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel("round (global index)")
    axes.set_ylabel("mean accuracy over the group's clients")
    axes.set_title(title)
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize="small")
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    atomic_write_bytes(path, buffer.getvalue())
    return True


def plot_run(
    records: Sequence[RoundRecord], accuracy_path: Path, loss_path: Path, label: str, local_path: Path | None = None
) -> None:
    plot_metric(records, "accuracy", accuracy_path, f"test accuracy ({label})")
    plot_metric(records, "loss", loss_path, f"test loss ({label})")
    if local_path is not None:
        plot_local_accuracy(records, local_path, f"accuracy on the clients' own test data ({label})")

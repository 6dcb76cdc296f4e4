"""PNG plots of a run: test accuracy and test loss per round (matplotlib, Agg backend)."""

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


def plot_run(records: Sequence[RoundRecord], accuracy_path: Path, loss_path: Path, label: str) -> None:
    plot_metric(records, "accuracy", accuracy_path, f"test accuracy ({label})")
    plot_metric(records, "loss", loss_path, f"test loss ({label})")

"""The run's plots carry what a person reads them for: the chance level on accuracy and
loss, each group's epsilon spent against its budget (docs/trainer.md §Plots)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trainer.run.metrics import RoundRecord
from trainer.run.plots import chance_level, metric_figure, privacy_figure


def record(round_index, accuracy, loss, spent):
    return RoundRecord(
        round=round_index, loss=loss, accuracy=accuracy, epsilon_spent=spent, aborted_pools=[],
        sampled={}, survived={}, dropped_before_masking=0, dropped_after_masking=0, seconds=0.1,
    )


RECORDS = [
    record(3, None, None, {"strict": 0.4, "loose": 1.0, "out": None}),
    record(4, 0.5, 1.2, {"strict": 0.6, "loose": 1.8, "out": None}),
    record(5, 0.7, 0.9, {"strict": 0.9, "loose": 2.5, "out": None}),
]


def legend_texts(figure):
    legend = figure.axes[0].get_legend()
    return [] if legend is None else [t.get_text() for t in legend.get_texts()]


def test_chance_level_is_the_best_constant_predictor():
    chance = chance_level(np.array([0, 0, 1, 2]), "classification")
    assert chance.accuracy == 0.5
    assert chance.loss == pytest.approx(-(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25)))
    assert chance_level(np.array([0.5, 1.5]), "regression") is None
    assert chance_level(np.array([], dtype=np.int64), "classification") is None


@pytest.mark.parametrize("metric", ["accuracy", "loss"])
def test_metric_plot_draws_the_evaluated_rounds_and_the_chance_line(metric):
    chance = chance_level(np.array([0, 0, 0, 1]), "classification")
    figure = metric_figure(RECORDS, metric, f"test {metric}", chance)
    axes = figure.axes[0]
    curve, level = axes.get_lines()
    # only evaluated rounds, at their global indices (the files' round numbers)
    assert list(curve.get_xdata()) == [4, 5]
    assert list(curve.get_ydata()) == [r.__getattribute__(metric) for r in RECORDS[1:]]
    assert set(level.get_ydata()) == {getattr(chance, metric)} and level.get_linestyle() == "--"
    assert any(text.startswith("chance") for text in legend_texts(figure))
    assert axes.get_xlabel() == "round (global index)"
    without = metric_figure(RECORDS, metric, "t")
    assert len(without.axes[0].get_lines()) == 1 and not any("chance" in t for t in legend_texts(without))


def test_privacy_plot_has_each_private_group_spent_and_budget():
    figure = privacy_figure(RECORDS, {"strict": 1.0, "loose": 3.0, "out": None}, "privacy", "client-level DP")
    axes = figure.axes[0]
    lines = {line.get_label(): line for line in axes.get_lines()}
    assert set(lines) == {"strict: spent", "strict: budget 1", "loose: spent", "loose: budget 3"}
    assert list(lines["loose: spent"].get_xdata()) == [3, 4, 5]
    assert list(lines["loose: spent"].get_ydata()) == [1.0, 1.8, 2.5]
    assert set(lines["strict: budget 1"].get_ydata()) == {1.0}
    # a group's budget line has its spent line's colour
    assert lines["strict: budget 1"].get_color() == lines["strict: spent"].get_color()
    assert "client-level DP" in axes.get_title() and axes.get_ylabel() == "epsilon spent"
    nonprivate = [record(0, 0.5, 1.0, {"out": None})]
    assert privacy_figure(nonprivate, {"out": None}, "privacy", "client-level DP") is None
    # a long notion (a silo run's) is wrapped so that the title is not cut off at the sides
    notion = "silo-specific sample-level (epsilon, delta)-DP per silo (add/remove one example of that silo)"
    wrapped = privacy_figure(RECORDS, {"strict": 1.0}, "privacy", notion).axes[0].get_title()
    assert max(len(line) for line in wrapped.splitlines()) <= 55 and " ".join(wrapped.split()[1:]) == notion


def test_a_smoke_mark_is_drawn_over_the_plot_pixel_for_pixel(tmp_path) -> None:
    """docs/results.md §Runner: a smoke cell's plot is redrawn unchanged with SMOKE_MARK across it."""
    import numpy as np
    from matplotlib.image import AxesImage, imread

    from trainer.run.plots import SMOKE_MARK, _new_figure, mark_smoke_pngs, save_png, smoke_marked_figure

    figure, axes = _new_figure()
    axes.plot([0, 1, 2], [0.1, 0.5, 0.7])
    save_png(figure, tmp_path / "accuracy.png")
    original = imread(tmp_path / "accuracy.png")
    marked = smoke_marked_figure(tmp_path / "accuracy.png")
    assert [t.get_text() for t in marked.texts] == [SMOKE_MARK]
    [image] = [a for a in marked.axes[0].get_children() if isinstance(a, AxesImage)]
    assert np.array_equal(image.get_array(), original)
    assert mark_smoke_pngs(tmp_path) == [tmp_path / "accuracy.png"]
    assert not np.array_equal(imread(tmp_path / "accuracy.png"), original)  # the mark is on the image

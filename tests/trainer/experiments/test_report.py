"""The results.md caption says how many seeds the mean and std are over."""

from __future__ import annotations

from trainer.experiments import report


def test_the_caption_counts_seeds_and_names_them():
    # one seed: no std, and its value is not mistaken for a count
    assert report.accuracy_caption([3]) == "Final test accuracy, one seed (seed 3; no std)"
    assert report.accuracy_caption([0, 1, 2]) == "Final test accuracy, mean ± std over 3 seeds (0, 1, 2)"

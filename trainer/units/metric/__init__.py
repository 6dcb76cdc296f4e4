"""The ``metric_local`` privacy unit (local metric privacy): each client releases its model
plus Laplace noise in R^n (docs/metric-privacy.md; docs/trainer.md §Layout)."""

"""The ``client`` privacy unit (client-level DP per group): clipped client updates, Gaussian
noise shares and secure aggregation per pool (docs/trainer.md §Layout)."""

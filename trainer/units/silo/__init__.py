"""The ``silo_sample`` privacy unit (sample-level DP per silo): every silo runs DP-SGD every
round (docs/mrmtl.md; docs/trainer.md §Layout)."""

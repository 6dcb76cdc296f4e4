"""The trainer's privacy units, one folder each (docs/trainer.md §Layout): a unit's
mechanism, round engine, strategies, ledger and run preparation live in
``trainer/units/<unit>/``."""

"""What a training run is made of, below the privacy units that build on it: the run's
configuration, directory, checkpoints, metrics log, records, summary, plots, progress and
reporting, the unit interface (``unit.TrainingUnit``), the prepared run and the loop's
shared steps (docs/trainer.md §Runs, checkpoints and resume; §Layout). The one run loop
that drives a unit's run is ``trainer.runner``, above the units.
"""

"""The experiment runner: grids of training runs (methods x datasets x settings x seeds),
resumable, with CSV, Markdown and PNG reports (docs/results.md §Runner)."""

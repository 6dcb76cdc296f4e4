"""The metric unit's training strategies (docs/metric-privacy.md §5-§6)."""

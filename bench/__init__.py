"""Benchmarks that run gdpfed side by side with its peers in one process and print ratios."""

"""Privacy accountants and noise calibration for the Poisson-subsampled Gaussian mechanism.

No torch, no FastAPI: this package imports nothing of the project and is the bottom of
the dependency graph.
"""

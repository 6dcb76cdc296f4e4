"""GDPFed+ planning: the plan schema (the contract with the service and the trainer),
the methods that choose pools, sampling rates, noise and sparsity, and re-planning.

Imports ``accounting``; never torch.
"""

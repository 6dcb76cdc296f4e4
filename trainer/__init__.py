"""PyTorch federated-learning simulator that executes a plan document.

The only package that imports torch.
"""

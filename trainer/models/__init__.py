"""Models that work under ``torch.func`` (``docs/trainer.md``, "Models").

No model has buffers or BatchNorm, so ``functional_call`` + ``vmap`` + ``grad`` run
one copy of the parameters per client.
"""

from trainer.models.build import MODELS, build_model
from trainer.models.cnn import CNN
from trainer.models.lstm import CharLSTM
from trainer.models.mlp import MLP
from trainer.models.resnet import ResNet18GN

__all__ = ["CNN", "MLP", "MODELS", "CharLSTM", "ResNet18GN", "build_model"]

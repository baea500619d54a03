"""Approximate unlearning on a plain ViT: the yardstick MUNKEY is compared against.

Build and train the model, then unlearn::

    from forgetting_lab.baselines.approximate import TrainConfig, ViTClassifier, unlearn
    model = ViTClassifier(train=TrainConfig(epochs=15, seed=0)).fit(X, y)   # X: (n, 28, 28)
    new = unlearn("scrub", model, (X[f], y[f]), (X[r], y[r]))             # model untouched

Methods (:data:`METHODS`): retrain (oracle), finetune, neggrad_plus, amnesiac, scrub, ssd.
Importing this package loads torch.
"""

from .methods import METHODS, unlearn
from .vit import FrozenViTEncoder, TrainConfig, ViTClassifier, as_tensors, run_epochs

__all__ = [
    "METHODS",
    "FrozenViTEncoder",
    "TrainConfig",
    "ViTClassifier",
    "as_tensors",
    "run_epochs",
    "unlearn",
]

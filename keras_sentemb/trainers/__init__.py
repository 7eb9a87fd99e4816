"""One keras.Model subclass per training method, each overriding train_step."""

from keras_sentemb.trainers.base_trainer import BaseTrainer
from keras_sentemb.trainers.callbacks import NonFiniteGuard, STSDevEvaluation

__all__ = ["BaseTrainer", "NonFiniteGuard", "STSDevEvaluation"]

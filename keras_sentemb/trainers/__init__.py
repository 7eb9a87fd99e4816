"""One keras.Model subclass per training method, each overriding train_step."""

from keras_sentemb.trainers.base_trainer import BaseTrainer

__all__ = ["BaseTrainer"]

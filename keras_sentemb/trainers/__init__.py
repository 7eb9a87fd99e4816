"""One keras.Model subclass per training method, each a `BaseTrainer` with its own loss hook."""

from keras_sentemb.trainers.base_trainer import BaseTrainer

__all__ = ["BaseTrainer"]

"""What every method's trainer shares: `BaseTrainer` (the train step), GradCache, Matryoshka, the optimizers.

Each method's own trainer (a `BaseTrainer` with its loss hook) lives beside the
method, in `keras_sentemb/methods/<method>/trainer.py`.
"""

from keras_sentemb.trainers.base_trainer import BaseTrainer

__all__ = ["BaseTrainer"]

"""The step learning-rate schedule of Contrastive Tension's official code."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_sentemb")
class CTLearningRateSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """CT's step schedule: 1e-5 to step 500, then 8e-6, 6e-6, 4e-6, 2e-6.

    Steps are counted from 1 (the optimizer's `iterations` + 1): steps 1-500
    use `learning_rate`, 501-1000 0.8x, 1001-1500 0.6x, 1501-2000 0.4x and
    every later step 0.2x.

    Args:
        learning_rate: float. The first stage's rate. Defaults to `1e-5`.
        boundaries: tuple of int. Last step of each stage. Defaults to
            `(500, 1000, 1500, 2000)`.
        factors: tuple of float. Multiplier per stage, one more than
            `boundaries`. Defaults to `(1.0, 0.8, 0.6, 0.4, 0.2)`.

    References:
        - [Carlsson et al., 2021](https://openreview.net/forum?id=Ov_sMNau-PF)
    """

    def __init__(
        self,
        learning_rate=1e-5,
        boundaries=(500, 1000, 1500, 2000),
        factors=(1.0, 0.8, 0.6, 0.4, 0.2),
    ):
        if len(factors) != len(boundaries) + 1:
            raise ValueError(
                f"`factors` needs len(boundaries) + 1 = {len(boundaries) + 1} "
                f"values, received {len(factors)}."
            )
        if not learning_rate > 0:
            raise ValueError(f"`learning_rate` must be > 0, received {learning_rate!r}.")
        self.learning_rate = float(learning_rate)
        self.boundaries = tuple(int(b) for b in boundaries)
        self.factors = tuple(float(f) for f in factors)

    def __call__(self, step):
        step = ops.cast(step, "float32") + 1.0
        factor = ops.convert_to_tensor(self.factors[-1], "float32")
        for boundary, f in reversed(list(zip(self.boundaries, self.factors[:-1]))):
            factor = ops.where(step <= boundary, f, factor)
        return self.learning_rate * factor

    def get_config(self):
        return {
            "learning_rate": self.learning_rate,
            "boundaries": list(self.boundaries),
            "factors": list(self.factors),
        }

"""`LogitScale`: the learnable multiplier of cosine similarities (CLIP-style)."""

import math

import keras
from keras import ops

from keras_sentemb import validation


@keras.saving.register_keras_serializable(package="keras_sentemb")
class ClampConstraint(keras.constraints.Constraint):
    """Clips a variable into `[low, high]`; Keras optimizers apply it after each update."""

    def __init__(self, low, high):
        self.low = float(low)
        self.high = float(high)

    def __call__(self, w):
        return ops.clip(w, self.low, self.high)

    def get_config(self):
        return {"low": self.low, "high": self.high}


@keras.saving.register_keras_serializable(package="keras_sentemb")
class LogitScale(keras.layers.Layer):
    """A logit scale `s = exp(log_s)`, learnable or fixed, clamped to `[1, max_scale]`.

    The scale is stored as its log, initialised at `log(initial_scale)` and
    kept in `[0, log(max_scale)]` by a weight constraint, which Keras
    optimizers apply after every update (CLIP's clamp at 100). Trainers
    exclude it from weight decay (`BaseTrainer.compile` does it for every
    `LogitScale`). Calling the layer returns the float32 scale.

    Args:
        initial_scale: float. The starting scale, e.g. `20.0` (temperature
            0.05) or `1 / 0.07`. Defaults to `20.0`.
        max_scale: float. Upper clamp. Defaults to `100.0`.
        learnable: bool. Train the scale (else it stays `initial_scale`).
            Defaults to `True`.

    Examples:

    >>> scale = LogitScale(initial_scale=20.0)
    >>> round(float(scale()), 4)
    20.0
    """

    def __init__(self, initial_scale=20.0, max_scale=100.0, learnable=True, **kwargs):
        super().__init__(**kwargs)
        self.initial_scale = validation.positive_float(initial_scale, "initial_scale")
        self.max_scale = validation.positive_float(max_scale, "max_scale")
        if not 1.0 <= self.initial_scale <= self.max_scale:
            raise ValueError(
                "`initial_scale` must be in [1, max_scale]. Received: "
                f"initial_scale={initial_scale!r}, max_scale={max_scale!r}."
            )
        self.learnable = bool(learnable)
        self.log_scale = self.add_weight(
            shape=(),
            initializer=keras.initializers.Constant(math.log(self.initial_scale)),
            constraint=ClampConstraint(0.0, math.log(self.max_scale)),
            trainable=self.learnable,
            dtype="float32",
            name="log_scale",
        )
        self.built = True

    def call(self, inputs=None):
        return ops.exp(ops.cast(self.log_scale, "float32"))

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "initial_scale": self.initial_scale,
                "max_scale": self.max_scale,
                "learnable": self.learnable,
            }
        )
        return config

"""Learning-rate schedules of the methods: Keras' own where one exists.

- Contrastive Tension's step schedule is Keras' `PiecewiseConstantDecay`.
- The linear warm-up then cosine decay of the parallel-pairs method is
  Keras' `CosineDecay(warmup_target=...)`.
- Linear warm-up then linear decay to 0 (Hugging Face's default, used by
  SimCSE, ConSERT, SG-OPT and STS regression) has no Keras equivalent; it is
  the one registered schedule here, `LinearWarmupDecay`.
"""

import keras
from keras import ops

from keras_sentemb import validation
from keras_sentemb.trainers.optimizers import AdamW

CT_BOUNDARIES = (500, 1000, 1500, 2000)
CT_FACTORS = (1.0, 0.8, 0.6, 0.4, 0.2)


def ct_learning_rate_schedule(learning_rate=1e-5, boundaries=CT_BOUNDARIES, factors=CT_FACTORS):
    """Contrastive Tension's step schedule as a `PiecewiseConstantDecay`.

    Steps are counted from 1 as in the official code: steps 1-500 use
    `learning_rate`, 501-1000 0.8x, 1001-1500 0.6x, 1501-2000 0.4x, later
    steps 0.2x (1e-5, 8e-6, 6e-6, 4e-6, 2e-6 by default). Keras passes the
    optimizer's 0-based `iterations`, so the boundaries are shifted by one.

    Args:
        learning_rate: float. The first stage's rate. Defaults to `1e-5`.
        boundaries: tuple of int. Last step (1-based) of each stage.
        factors: tuple of float. Multiplier per stage, one more than
            `boundaries`.

    Returns:
        A `keras.optimizers.schedules.PiecewiseConstantDecay`.

    References:
        - [Carlsson et al., 2021](https://openreview.net/forum?id=Ov_sMNau-PF)
    """
    learning_rate = validation.positive_float(learning_rate, "learning_rate")
    if len(factors) != len(boundaries) + 1:
        raise ValueError(
            f"`factors` needs len(boundaries) + 1 = {len(boundaries) + 1} values. "
            f"Received: {len(factors)}."
        )
    return keras.optimizers.schedules.PiecewiseConstantDecay(
        boundaries=[int(b) - 1 for b in boundaries],
        values=[learning_rate * float(f) for f in factors],
    )


def warmup_cosine_decay(learning_rate, steps, warmup_ratio=0.1):
    """Linear warm-up from 0, then cosine decay to 0 (Keras' `CosineDecay`)."""
    learning_rate = validation.positive_float(learning_rate, "learning_rate")
    warmup = int(round(validation.fraction(warmup_ratio, "warmup_ratio") * steps))
    decay_steps = max(1, int(steps) - warmup)
    if warmup == 0:
        return keras.optimizers.schedules.CosineDecay(learning_rate, decay_steps)
    return keras.optimizers.schedules.CosineDecay(
        0.0, decay_steps, alpha=0.0, warmup_target=learning_rate, warmup_steps=warmup
    )


@keras.saving.register_keras_serializable(package="keras_sentemb")
class LinearWarmupDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up from 0 to `learning_rate`, then linear decay to 0.

    At 0-based step `t`: `learning_rate * t / warmup_steps` while
    `t < warmup_steps`, then `learning_rate * (total_steps - t) /
    (total_steps - warmup_steps)`, never below 0. Without warm-up the first
    step uses the full rate. Hugging Face's `get_linear_schedule_with_warmup`,
    which SimCSE, ConSERT and SG-OPT train with.

    Args:
        learning_rate: float. The peak rate.
        total_steps: int. Steps of the run.
        warmup_steps: int. Steps of linear warm-up. Defaults to `0`.

    Examples:

    >>> schedule = LinearWarmupDecay(1e-4, total_steps=10, warmup_steps=2)
    >>> [round(float(schedule(t)) * 1e4, 3) for t in (0, 1, 2, 6, 10)]
    [0.0, 0.5, 1.0, 0.5, 0.0]
    """
    def __init__(self, learning_rate, total_steps, warmup_steps=0):
        self.learning_rate = validation.positive_float(learning_rate, "learning_rate")
        self.total_steps = validation.positive_int(total_steps, "total_steps")
        self.warmup_steps = validation.non_negative_int(warmup_steps, "warmup_steps")
        if self.warmup_steps >= self.total_steps:
            raise ValueError(
                "`warmup_steps` must be smaller than `total_steps`. Received: "
                f"warmup_steps={warmup_steps}, total_steps={total_steps}."
            )

    def __call__(self, step):
        step = ops.cast(step, "float32")
        down = (self.total_steps - step) / float(self.total_steps - self.warmup_steps)
        rate = ops.maximum(0.0, down)
        if self.warmup_steps:
            rate = ops.where(step < self.warmup_steps, step / float(self.warmup_steps), rate)
        return self.learning_rate * rate

    def get_config(self):
        return {
            "learning_rate": self.learning_rate,
            "total_steps": self.total_steps,
            "warmup_steps": self.warmup_steps,
        }


def linear_warmup_decay(learning_rate, steps, warmup_ratio=0.0):
    """`LinearWarmupDecay` with `round(warmup_ratio * steps)` warm-up steps."""
    warmup = int(round(validation.fraction(warmup_ratio, "warmup_ratio") * steps))
    return LinearWarmupDecay(learning_rate, steps, min(warmup, int(steps) - 1))


def adamw_linear_decay(learning_rate, steps, warmup_ratio=0.0, weight_decay=0.0, **kwargs):
    """AdamW (epsilon 1e-6, as Hugging Face's) on a `LinearWarmupDecay` schedule.

    Extra keyword arguments go to `keras.optimizers.AdamW` (e.g. `beta_2`,
    `global_clipnorm`); the class is its fused form
    (`keras_sentemb.trainers.optimizers.AdamW`).
    """
    kwargs.setdefault("epsilon", 1e-6)
    return AdamW(
        learning_rate=linear_warmup_decay(learning_rate, steps, warmup_ratio),
        weight_decay=validation.non_negative_float(weight_decay, "weight_decay"),
        **kwargs,
    )

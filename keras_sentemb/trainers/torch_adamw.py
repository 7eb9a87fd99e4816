"""AdamW with PyTorch's update: epsilon on the bias-corrected root, decoupled decay.

`keras.optimizers.Adam` / `AdamW` compute

    w -= lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps)

so their epsilon sits next to the *uncorrected* root of the second moment:
relative to the corrected root it is `eps / sqrt(1 - b2^t)`, 32x larger at
step 1 than at convergence. `torch.optim.AdamW` (what the papers' code and
sentence-transformers train with) computes

    w *= 1 - lr * wd
    w -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)

with `eps = 1e-8`. Early in training, where gradients are small (an encoder's
weights outside the embeddings see root-mean-square gradients around 1e-4),
the two move weights by visibly different amounts; `TorchAdamW` gives
PyTorch's numbers (tests/trainers/test_torch_adamw.py compares with stored
`torch.optim.AdamW` values).

The update of each variable runs as one XLA-compiled kernel (as the fused
optimizers in `keras_sentemb.trainers.optimizers`), with the decay folded in;
`fused=False` or `KERAS_SENTEMB_PLAIN_OPTIMIZER=1` runs the same formula as
Keras ops. Sparse gradients (the token embedding's) are made dense first.
"""

import keras
import tensorflow as tf
from keras import ops

from keras_sentemb import compat
from keras_sentemb.trainers.optimizers import _assign, _FusedUpdate, _kernel, _values


def _torch_adamw_kernel(owner, beta_1, beta_2, epsilon, decay):
    def step(variable, m, v, gradient, step_size, root_correction, decay_factor):
        m = m + (gradient - m) * (1 - beta_1)
        v = v * beta_2 + gradient * gradient * (1 - beta_2)
        value = variable * decay_factor if decay else variable
        denominator = tf.sqrt(v) / root_correction + epsilon
        return value - step_size * (m / denominator), m, v

    return _kernel(owner, ("torch_adamw", beta_1, beta_2, epsilon, decay), step)


@keras.saving.register_keras_serializable(package="keras_sentemb")
class TorchAdamW(_FusedUpdate, keras.optimizers.Optimizer):
    """AdamW exactly as `torch.optim.AdamW` computes it (amsgrad off).

    Per step `t`, for each variable `w` with gradient `g`:
    `m = b1 m + (1 - b1) g`, `v = b2 v + (1 - b2) g^2`, `w *= 1 - lr * wd`
    (decoupled weight decay, skipped for variables excluded with
    `exclude_from_weight_decay`), then
    `w -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)`.
    Unlike `keras.optimizers.AdamW`, epsilon is added to the bias-corrected
    root, so it means what it means in PyTorch and in the papers' code; the
    defaults are PyTorch's too (`epsilon=1e-8`, `weight_decay=0.01`).
    Slots are named as Keras' Adam names them (`momentum`, `velocity`).
    Works under `keras.mixed_precision` (float32 variables, any gradient
    dtype), inside `LossScaleOptimizer` and under `tf.distribute` strategies.

    Args:
        learning_rate: float or `keras.optimizers.schedules.LearningRateSchedule`.
            Defaults to `1e-3`.
        beta_1: float. Decay of the first moment. Defaults to `0.9`.
        beta_2: float. Decay of the second moment. Defaults to `0.999`.
        epsilon: float. Added to the bias-corrected root of the second
            moment. Defaults to `1e-8`.
        weight_decay: float. Decoupled weight decay (the variable shrinks by
            `learning_rate * weight_decay` of itself each step); `0` or
            `None` turns it off. Defaults to `0.01`.
        fused: bool. Run each variable's update as one compiled kernel.
            Defaults to `True`.
        **kwargs: the base optimizer's arguments (`clipnorm`,
            `global_clipnorm`, `use_ema`, `gradient_accumulation_steps`,
            `name`, ...).

    Examples:

    ```python
    from keras_sentemb.trainers.torch_adamw import TorchAdamW

    trainer.compile(optimizer=TorchAdamW(3e-5, weight_decay=0.0))
    ```

    References:
        - Loshchilov & Hutter, Decoupled Weight Decay Regularization
          (ICLR 2019).
        - Kingma & Ba, Adam: A Method for Stochastic Optimization (ICLR 2015).
    """

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-8,
                 weight_decay=0.01, fused=True, name="torch_adamw", **kwargs):
        if not 0.0 <= float(beta_1) < 1.0 or not 0.0 <= float(beta_2) < 1.0:
            raise ValueError(
                f"`beta_1` and `beta_2` must be in [0, 1); received {beta_1!r}, {beta_2!r}."
            )
        if float(epsilon) < 0.0:
            raise ValueError(f"`epsilon` must be >= 0; received {epsilon!r}.")
        if weight_decay is not None and float(weight_decay) < 0.0:
            raise ValueError(f"`weight_decay` must be >= 0; received {weight_decay!r}.")
        super().__init__(learning_rate=learning_rate, weight_decay=weight_decay or None,
                         fused=fused, name=name, **kwargs)
        self.beta_1 = float(beta_1)
        self.beta_2 = float(beta_2)
        self.epsilon = float(epsilon)

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        self._momentums, self._velocities = self.add_optimizer_variables(
            var_list, ["momentum", "velocity"]
        )

    def _corrections(self, dtype, learning_rate):
        # In float64 as PyTorch (Python floats): in float32, 1 - 0.999^t
        # alone is off by 1e-5 of itself. tf.constant, not tf.cast: a Python
        # float cast goes through float32.
        step = tf.cast(self.iterations + 1, tf.float64)
        lr = tf.cast(learning_rate, tf.float64)
        step_size = lr / (1 - tf.pow(tf.constant(self.beta_1, tf.float64), step))
        root_correction = tf.sqrt(1 - tf.pow(tf.constant(self.beta_2, tf.float64), step))
        return tf.cast(lr, dtype), tf.cast(step_size, dtype), tf.cast(root_correction, dtype)

    def update_step(self, gradient, variable, learning_rate):
        index = compat.optimizer_variable_index(self, variable)
        gradient = self._dense(gradient, variable)
        lr, step_size, root_correction = self._step_values.get(
            ("torch_adamw", variable.dtype, id(learning_rate)),
            lambda: self._corrections(variable.dtype, learning_rate))
        m, v = self._momentums[index], self._velocities[index]
        if self._fuses():
            decays, decay_rate = self._decay_rate(variable, lr)
            kernel = _torch_adamw_kernel(self, self.beta_1, self.beta_2, self.epsilon, decays)
            targets = [self._tf_variable(x) for x in (variable, m, v)]
            _assign(targets, kernel(*_values(targets), gradient, step_size, root_correction,
                                    1 - decay_rate))
            return
        # Keras already applied the decay (`_apply_weight_decay`), before the update as PyTorch.
        self.assign_add(m, ops.multiply(ops.subtract(gradient, m), 1 - self.beta_1))
        self.assign(v, ops.add(ops.multiply(v, self.beta_2),
                               ops.multiply(ops.square(gradient), 1 - self.beta_2)))
        denominator = ops.add(ops.divide(ops.sqrt(v), root_correction), self.epsilon)
        self.assign_sub(variable, ops.multiply(step_size, ops.divide(m, denominator)))

    def get_config(self):
        config = super().get_config()
        config.update({"beta_1": self.beta_1, "beta_2": self.beta_2, "epsilon": self.epsilon})
        if config.get("weight_decay") is None:
            config["weight_decay"] = 0.0
        return config

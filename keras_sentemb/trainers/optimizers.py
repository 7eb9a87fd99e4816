"""Keras' RMSprop, Adam and AdamW with each variable's update as one fused kernel.

Keras 3 updates a variable with a chain of element-wise ops (RMSprop: square,
two multiplies, add, assign, add, sqrt, multiply, divide, subtract), each a
full pass over memory. For CT's two copies of the default model (45M values)
that chain took about 0.5 s of a 2.5 s training step on one CPU core. The
classes here run the same formula, in the same order, as one XLA-compiled
kernel per variable (`tf.function(jit_compile=True)`), and fold AdamW's
decoupled weight decay into it: about 0.08 s for the same update
(`python benchmarks/optimizer_step.py`).

They are drop-in subclasses: same arguments, slots, variable names and
checkpoints as `keras.optimizers.RMSprop` / `Adam` / `AdamW`, plus
`fused=True`. Settings the kernels do not cover (`centered` RMSprop,
`amsgrad`) use Keras' own update. Sparse gradients (the token embedding's)
are made dense first in every case: Keras' own update squares their
duplicate rows one by one (see `base_trainer.dense_gradients`). Values equal
Keras' update of dense gradients to float32 rounding
(tests/trainers/test_optimizers.py).
`KERAS_SENTEMB_PLAIN_OPTIMIZER=1` turns the kernels off everywhere.

The kernels are pure functions (tensors in, new values out; the optimizer
assigns the results) and shared by every optimizer in the process, one per
formula, constants and variable shape. A kernel that took the variables
themselves would be traced over one run's variables: called again from a
later run's step it referred to deleted variables, and giving each
optimizer its own instead left each run's compiled kernels in TensorFlow's
process-wide XLA cache (about 50 MiB a `fit_*` on the default model). Pure
kernels compile once per process and are right for any variables.
"""

import os
import weakref

import keras
import tensorflow as tf

from keras_sentemb import compat

# (formula, constants) -> compiled kernel, shared by every optimizer of the process.
_KERNELS = {}
# optimizer -> the keys of the kernels it has called (for tests and inspection).
_USED = weakref.WeakKeyDictionary()


def fused_enabled(fused=True):
    """Whether the fused kernels run (`fused` and no `KERAS_SENTEMB_PLAIN_OPTIMIZER=1`)."""
    return bool(fused) and os.environ.get("KERAS_SENTEMB_PLAIN_OPTIMIZER", "") != "1"


def _kernel(owner, name, build):
    """The compiled kernel for one formula and set of constants, called by `owner`.

    `build` is a pure function of tensors that returns the new values; the
    caller assigns them. Kernels are shared by every optimizer: a second
    `fit_*` in one process reuses the first one's compiled code for its own
    variables instead of compiling (and keeping) its own copy.
    """
    _USED.setdefault(owner, set()).add(name)
    fn = _KERNELS.get(name)
    if fn is None:
        fn = _KERNELS[name] = tf.function(build, jit_compile=True, autograph=False)
    return fn


def kernel_names(owner):
    """The (formula, constants) keys of the kernels `owner` has called so far."""
    return sorted(_USED.get(owner, ()), key=repr)


def _values(variables):
    """The variables' current values as tensors: a kernel never sees a variable."""
    return [tf.convert_to_tensor(v) for v in variables]


def _assign(targets, values):
    for target, value in zip(targets, values):
        target.assign(value)


def _decayed(variable, decay_rate):
    # AdamW's decoupled decay, as Keras' `_apply_weight_decay` writes it.
    return variable - variable * decay_rate


def _rmsprop_kernel(owner, rho, epsilon, momentum, decay):
    def increment(velocity, gradient, lr):
        velocity = rho * velocity + (1 - rho) * tf.square(gradient)
        return velocity, (lr * gradient) / tf.sqrt(velocity + epsilon)

    def step(variable, velocity, gradient, lr, decay_rate):
        value = _decayed(variable, decay_rate) if decay else variable
        velocity, change = increment(velocity, gradient, lr)
        return value - change, velocity

    def step_with_momentum(variable, velocity, moment, gradient, lr, decay_rate):
        value = _decayed(variable, decay_rate) if decay else variable
        velocity, change = increment(velocity, gradient, lr)
        moment = momentum * moment + change
        return value - moment, velocity, moment

    if momentum > 0:
        return _kernel(owner, ("rmsprop_momentum", rho, epsilon, momentum, decay), step_with_momentum)
    return _kernel(owner, ("rmsprop", rho, epsilon, decay), step)


def _adam_kernel(owner, beta_1, beta_2, epsilon, decay):
    def step(variable, m, v, gradient, alpha, decay_rate):
        m = m + (gradient - m) * (1 - beta_1)
        v = v + (tf.square(gradient) - v) * (1 - beta_2)
        value = _decayed(variable, decay_rate) if decay else variable
        return value - (m * alpha) / (tf.sqrt(v) + epsilon), m, v

    return _kernel(owner, ("adam", beta_1, beta_2, epsilon, decay), step)


class _StepValues:
    """Tensors shared by every variable's update within one `apply` call.

    Bias corrections and learning-rate casts depend on the step only; built
    once per step (per graph: a `tf.while_loop` or `tf.cond` body is its own
    graph) instead of once per variable, they keep a traced training step
    a few hundred ops smaller and quicker to trace.
    """

    def __init__(self):
        self._values = None

    def begin(self):
        self._values = {}

    def end(self):
        self._values = None

    def get(self, key, make):
        """`make()`, computed once per (graph, key) while an `apply` call runs."""
        if self._values is None:
            return make()
        graph = None if tf.executing_eagerly() else tf.compat.v1.get_default_graph()
        key = (graph, key)
        if key not in self._values:
            self._values[key] = make()
        return self._values[key]


class _FusedUpdate:
    """Shared logic: when to fuse, the decay bookkeeping, per-step values, config."""

    def __init__(self, *args, fused=True, **kwargs):
        super().__init__(*args, **kwargs)
        self.fused = bool(fused)
        self._decayed_keys = None
        self._step_values = _StepValues()

    def apply(self, grads, trainable_variables=None):
        self._step_values.begin()
        try:
            return super().apply(grads, trainable_variables)
        finally:
            self._step_values.end()

    def _fuses(self):
        return fused_enabled(self.fused)

    def update_step(self, gradient, variable, learning_rate):
        gradient = self._dense(gradient, variable)
        if not self._fuses() or not self._kernel_covers():
            return super().update_step(gradient, variable, learning_rate)
        self._fused_update(gradient, variable, learning_rate)

    def _kernel_covers(self):
        """Whether the fused kernel implements this optimizer's settings."""
        raise NotImplementedError

    def _fused_update(self, gradient, variable, learning_rate):
        """The fused update of `variable` by the dense `gradient`."""
        raise NotImplementedError

    def _decay_before_update(self, variables):
        # Keras decays every variable in one pass before the updates; with
        # the kernels each variable's decay happens inside its update. Which
        # variables decay is decided here, by Keras' own rule.
        if not self._fuses():
            return compat.keras_weight_decay(_FusedUpdate, self, variables)
        if self.weight_decay is None:
            self._decayed_keys = set()
        else:
            self._decayed_keys = {
                compat.optimizer_variable_key(self, v) for v in variables
                if compat.optimizer_decays(self, v)
            }

    def _decay_rate(self, variable, lr):
        """(whether `variable` decays, its `weight_decay * lr`)."""
        decays = bool(self._decayed_keys) and (
            compat.optimizer_variable_key(self, variable) in self._decayed_keys
        )
        if not decays:
            return False, self._step_values.get(
                ("no_decay", variable.dtype), lambda: tf.zeros([], variable.dtype))
        return True, self._step_values.get(
            ("decay", variable.dtype, id(lr)),
            lambda: tf.cast(self.weight_decay, variable.dtype) * lr)

    @staticmethod
    def _dense(gradient, variable):
        if isinstance(gradient, tf.IndexedSlices):
            gradient = tf.convert_to_tensor(gradient)
        return tf.cast(gradient, variable.dtype)

    @staticmethod
    def _tf_variable(variable):
        return variable.value if isinstance(variable, keras.Variable) else variable

    def get_config(self):
        config = super().get_config()
        config["fused"] = self.fused
        return config


compat.install_weight_decay_hook(_FusedUpdate, _FusedUpdate._decay_before_update)


@keras.saving.register_keras_serializable(package="keras_sentemb")
class RMSprop(_FusedUpdate, keras.optimizers.RMSprop):
    """`keras.optimizers.RMSprop` whose per-variable update is one fused kernel.

    Args:
        fused: bool. Run the fused kernel (else Keras' own update). Defaults
            to `True`. `centered=True` always uses Keras' update.
        **kwargs: as `keras.optimizers.RMSprop`.

    Examples:

    ```python
    from keras_sentemb.trainers.optimizers import RMSprop

    trainer.compile(optimizer=RMSprop(1e-5))
    ```
    """

    def _kernel_covers(self):
        return not self.centered

    def _fused_update(self, gradient, variable, learning_rate):
        lr = self._step_values.get(("lr", variable.dtype, id(learning_rate)),
                                   lambda: tf.cast(learning_rate, variable.dtype))
        decays, decay_rate = self._decay_rate(variable, lr)
        kernel = _rmsprop_kernel(self, self.rho, self.epsilon, self.momentum, decays)
        names = ("velocities", "momentums") if self.momentum > 0 else ("velocities",)
        targets = [self._tf_variable(v)
                   for v in (variable, *compat.optimizer_slots(self, variable, *names))]
        _assign(targets, kernel(*_values(targets), gradient, lr, decay_rate))


@keras.saving.register_keras_serializable(package="keras_sentemb")
class Adam(_FusedUpdate, keras.optimizers.Adam):
    """`keras.optimizers.Adam` whose per-variable update is one fused kernel.

    Args:
        fused: bool. Run the fused kernel (else Keras' own update). Defaults
            to `True`. `amsgrad=True` always uses Keras' update.
        **kwargs: as `keras.optimizers.Adam`.

    Examples:

    ```python
    from keras_sentemb.trainers.optimizers import Adam

    trainer.compile(optimizer=Adam(3e-5))
    ```
    """

    def _kernel_covers(self):
        return not self.amsgrad

    def _fused_update(self, gradient, variable, learning_rate):
        momentum, velocity = compat.optimizer_slots(self, variable, "momentums", "velocities")
        dtype = variable.dtype

        def corrections():
            lr = tf.cast(learning_rate, dtype)
            local_step = tf.cast(self.iterations + 1, dtype)
            beta_1_power = tf.pow(tf.cast(self.beta_1, dtype), local_step)
            beta_2_power = tf.pow(tf.cast(self.beta_2, dtype), local_step)
            return lr, lr * tf.sqrt(1 - beta_2_power) / (1 - beta_1_power)

        lr, alpha = self._step_values.get(("adam", dtype, id(learning_rate)), corrections)
        decays, decay_rate = self._decay_rate(variable, lr)
        kernel = _adam_kernel(self, self.beta_1, self.beta_2, self.epsilon, decays)
        targets = [self._tf_variable(v) for v in (variable, momentum, velocity)]
        _assign(targets, kernel(*_values(targets), gradient, alpha, decay_rate))


@keras.saving.register_keras_serializable(package="keras_sentemb")
class AdamW(Adam, keras.optimizers.AdamW):
    """`keras.optimizers.AdamW` with the update and the weight decay as one fused kernel.

    Args:
        fused: bool. Run the fused kernel (else Keras' own update). Defaults
            to `True`.
        **kwargs: as `keras.optimizers.AdamW` (`weight_decay` defaults to
            `0.004`, Keras' default).

    Examples:

    ```python
    from keras_sentemb.trainers.optimizers import AdamW

    trainer.compile(optimizer=AdamW(2e-5, weight_decay=0.01))
    ```
    """


FUSED = {"rmsprop": RMSprop, "adam": Adam, "adamw": AdamW}


def get(identifier, **kwargs):
    """An optimizer from a name or an instance, fused where this module has it.

    `"rmsprop"`, `"adam"` and `"adamw"` give this module's classes; other
    names give Keras' (`keras.optimizers.get`); an `Optimizer` instance is
    returned as it is. `kwargs` (e.g. `learning_rate`) go to the class of a
    name.

    Args:
        identifier: str or `keras.optimizers.Optimizer`.
        **kwargs: constructor arguments for a name.

    Returns:
        a `keras.optimizers.Optimizer`.
    """
    if isinstance(identifier, keras.optimizers.Optimizer):
        return identifier
    if isinstance(identifier, str):
        cls = FUSED.get(identifier.lower())
        if cls is None:
            try:
                cls = type(keras.optimizers.get(identifier))
            except ValueError as e:
                raise ValueError(f"Unknown optimizer {identifier!r}: {e}") from e
        return cls(**kwargs)
    raise ValueError(
        f"`optimizer` must be a keras Optimizer or a name; received {identifier!r}."
    )

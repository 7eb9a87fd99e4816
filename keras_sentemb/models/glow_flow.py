"""`GlowFlow`: a Glow-style normalizing flow on sentence vectors (BERT-flow)."""

import math

import keras
import numpy as np
import scipy.linalg
import tensorflow as tf

from keras_sentemb import validation
from keras_sentemb.models.post_processing import PostProcessing

COUPLINGS = ("affine", "additive")
PERMUTATIONS = ("lu", "reverse")


class _ActNorm(keras.layers.Layer):
    """`y = (x + bias) * exp(log_scale)`, initialised from data (zero mean, unit variance)."""

    def __init__(self, dim, **kwargs):
        super().__init__(**kwargs)
        self.dim = dim

    def build(self, input_shape=None):
        self.bias = self.add_weight(shape=(self.dim,), initializer="zeros", name="bias")
        self.log_scale = self.add_weight(shape=(self.dim,), initializer="zeros", name="log_scale")
        self.built = True

    def initialize(self, x):
        """Glow's data-dependent initialisation on a batch `x` (numpy)."""
        x = np.asarray(x, np.float64)
        bias = -x.mean(axis=0)
        std = np.sqrt(np.mean((x + bias) ** 2, axis=0))
        self.bias.assign(bias)
        self.log_scale.assign(-np.log(std + 1e-6))

    def forward(self, x):
        y = (x + self.bias) * tf.exp(self.log_scale)
        return y, tf.reduce_sum(self.log_scale) * tf.ones_like(x[:, 0])

    def inverse(self, y):
        return y * tf.exp(-self.log_scale) - self.bias


class _InvertibleLinear(keras.layers.Layer):
    """Glow's invertible 1x1 convolution on a vector: `y = x @ W`.

    `"lu"`: `W = P L (U + diag(sign * exp(log_s)))`, `P` and the signs fixed,
    initialised from the LU decomposition of a random rotation; `log |det W| =
    sum(log_s)`. `"reverse"`: the fixed reversal of the dimensions (BERT-flow's
    `permutation: true` setting), `log |det W| = 0`.
    """
    def __init__(self, dim, mode="lu", seed=None, **kwargs):
        super().__init__(**kwargs)
        self.dim = dim
        self.mode = mode
        self.seed = seed

    def build(self, input_shape=None):
        if self.mode == "reverse":
            self.built = True
            return

        d = self.dim
        rotation = scipy.linalg.qr(np.random.RandomState(self.seed).normal(size=(d, d)))[0]
        p, lower, upper = scipy.linalg.lu(rotation)
        s = np.diag(upper)
        weights = {
            "permutation": (p, False), "sign": (np.sign(s), False),
            "lower": (lower, True), "upper": (np.triu(upper, 1), True),
            "log_s": (np.log(np.abs(s)), True),
        }
        for name, (value, trainable) in weights.items():
            var = self.add_weight(
                shape=value.shape, initializer="zeros", trainable=trainable, name=name
            )
            var.assign(value)
            setattr(self, name, var)
        self.built = True

    def matrix(self):
        """The `[dim, dim]` matrix W ("lu" mode)."""
        d = self.dim
        strict_lower = tf.constant(np.tril(np.ones((d, d)), -1), self.compute_dtype)
        lower = self.lower * strict_lower + tf.eye(d, dtype=self.compute_dtype)
        upper = self.upper * tf.transpose(strict_lower) + tf.linalg.diag(self.sign * tf.exp(self.log_s))
        return tf.matmul(self.permutation, tf.matmul(lower, upper))

    def forward(self, x):
        if self.mode == "reverse":
            return tf.reverse(x, [1]), tf.zeros_like(x[:, 0])
        return tf.matmul(x, self.matrix()), tf.reduce_sum(self.log_s) * tf.ones_like(x[:, 0])

    def inverse(self, y):
        if self.mode == "reverse":
            return tf.reverse(y, [1])
        return tf.matmul(y, tf.linalg.inv(self.matrix()))


class _Coupling(keras.layers.Layer):
    """Glow's coupling: the second half moves by a function of the first.

    `h = NN(x1)` (Dense-ReLU, Dense-ReLU, zero-initialised Dense). Affine:
    `y2 = (x2 + shift) * sigmoid(raw + 2)`, `log det = sum(log scale)`;
    additive: `y2 = x2 + shift`, `log det = 0`. `y1 = x1`.
    """
    def __init__(self, dim, width, coupling="affine", seed=None, **kwargs):
        super().__init__(**kwargs)
        self.dim = dim
        self.split = dim // 2
        self.coupling = coupling
        out = (dim - self.split) * (2 if coupling == "affine" else 1)
        init = keras.initializers.GlorotUniform(seed=seed)
        policy = kwargs.get("dtype")
        self.hidden_1 = keras.layers.Dense(width, activation="relu", kernel_initializer=init,
                                           dtype=policy, name="hidden_1")
        self.hidden_2 = keras.layers.Dense(width, activation="relu", kernel_initializer=init,
                                           dtype=policy, name="hidden_2")
        self.out = keras.layers.Dense(out, kernel_initializer="zeros", dtype=policy, name="out")

    def build(self, input_shape=None):
        self.hidden_1.build((None, self.split))
        self.hidden_2.build((None, self.hidden_1.units))
        self.out.build((None, self.hidden_2.units))
        self.built = True

    def _shift_scale(self, x1):
        h = self.out(self.hidden_2(self.hidden_1(x1)))
        if self.coupling == "additive":
            return h, None
        return h[:, 0::2], tf.sigmoid(h[:, 1::2] + 2.0)

    def forward(self, x):
        x1, x2 = x[:, : self.split], x[:, self.split :]
        shift, scale = self._shift_scale(x1)
        if scale is None:
            return tf.concat([x1, x2 + shift], 1), tf.zeros_like(x[:, 0])
        y2 = (x2 + shift) * scale
        return tf.concat([x1, y2], 1), tf.reduce_sum(tf.math.log(scale), axis=1)

    def inverse(self, y):
        y1, y2 = y[:, : self.split], y[:, self.split :]
        shift, scale = self._shift_scale(y1)
        x2 = y2 - shift if scale is None else y2 / scale - shift
        return tf.concat([y1, x2], 1)


@keras.saving.register_keras_serializable(package="keras_sentemb")
class GlowFlow(PostProcessing):
    """A Glow-style flow that maps sentence vectors to a standard Gaussian.

    BERT-flow (Li et al., 2020) learns an invertible map `z = f(x)` from
    sentence vectors `x` to a latent `z` with a standard normal prior by
    maximum likelihood on unlabelled sentences (the encoder frozen), then
    compares sentences by the cosine of their `z`. The flow here follows
    BERT-flow's Glow on a vector (its "1x1" spatial size): `levels` levels of
    `depth` steps, each step an actnorm, an invertible linear map (Glow's
    1x1 convolution) and a coupling; after every level but the last, half of
    the dimensions leave the flow (Glow's multi-scale split, with the
    standard normal prior as in BERT-flow). `z` concatenates the split-off
    halves and the last level's output, so `output_dim == input_dim`.

    `forward(x) -> (z, log_det)`, `inverse(z) -> x`, `log_prob(x)` (nats per
    vector); calling the layer returns `z`.

    Args:
        input_dim: int. Size of the vectors (at least `2 ** levels`).
        levels: int. Multi-scale levels. Defaults to `3` (BERT-flow's
            default configuration `l3_d3_w32`).
        depth: int. Flow steps per level. Defaults to `3`.
        coupling_width: int. Hidden width of the coupling networks.
            Defaults to `32`.
        coupling: str. `"affine"` (Glow) or `"additive"` (BERT-flow's
            configuration files). Defaults to `"affine"`.
        permutation: str. `"lu"` (Glow's learned invertible 1x1
            convolution, LU-parameterised) or `"reverse"` (a fixed reversal,
            BERT-flow's `permutation: true`). Defaults to `"lu"`.
        pooling: str or None. The pooling it was fitted on.
        seed: int or None. Seeds the random rotations and coupling weights.

    Examples:

    ```python
    flow = GlowFlow(384, pooling="mean_last2")
    flow.build()
    flow.initialize(vectors[:1024])      # data-dependent actnorm init
    z, log_det = flow.forward(vectors[:8])
    ```

    References:
        - [Li et al., 2020. On the Sentence Embeddings from Pre-trained
          Language Models](https://arxiv.org/abs/2011.05864) (BERT-flow)
        - [Kingma & Dhariwal, 2018. Glow: Generative Flow with Invertible
          1x1 Convolutions](https://arxiv.org/abs/1807.03039)
    """
    def __init__(
        self,
        input_dim,
        levels=3,
        depth=3,
        coupling_width=32,
        coupling="affine",
        permutation="lu",
        pooling=None,
        seed=None,
        **kwargs,
    ):
        super().__init__(input_dim, pooling=pooling, **kwargs)
        self.levels = validation.positive_int(levels, "levels")
        self.depth = validation.positive_int(depth, "depth")
        self.coupling_width = validation.positive_int(coupling_width, "coupling_width")
        self.coupling = validation.choice(coupling, "coupling", COUPLINGS)
        self.permutation = validation.choice(permutation, "permutation", PERMUTATIONS)
        self.seed = seed
        if self.input_dim < 2 ** self.levels:
            raise ValueError(
                f"A {self.levels}-level flow halves the vector {self.levels - 1} times and "
                f"needs input_dim >= {2 ** self.levels}; received {self.input_dim}."
            )
        policy = self.dtype_policy
        self.dims = [self.input_dim]
        for _ in range(self.levels - 1):
            self.dims.append(self.dims[-1] // 2)
        # Step i of the flow (level i // depth): actnorms[i], linears[i], couplings[i].
        self.actnorms, self.linears, self.couplings = [], [], []
        for i in range(self.levels * self.depth):
            dim = self.dims[i // self.depth]
            sub_seed = None if seed is None else seed * 1000 + i
            name = f"level{i // self.depth}_step{i % self.depth}"
            self.actnorms.append(_ActNorm(dim, dtype=policy, name=f"{name}_actnorm"))
            self.linears.append(_InvertibleLinear(
                dim, self.permutation, sub_seed, dtype=policy, name=f"{name}_linear"))
            self.couplings.append(_Coupling(
                dim, self.coupling_width, self.coupling, sub_seed, dtype=policy,
                name=f"{name}_coupling"))

    @property
    def output_dim(self):
        return self.input_dim

    def build(self, input_shape=None):
        for layers in zip(self.actnorms, self.linears, self.couplings):
            for layer in layers:
                layer.build()
        self.built = True

    def _level_steps(self, level):
        """The layers of each step of `level`, in forward order."""
        steps = range(level * self.depth, (level + 1) * self.depth)
        return [(self.actnorms[i], self.linears[i], self.couplings[i]) for i in steps]

    def forward(self, x):
        """`(z, log_det)`: the latent `[B, d]` and `log |det dz/dx|` `[B]`."""
        x = tf.cast(x, self.compute_dtype)
        log_det = tf.zeros_like(x[:, 0])
        split_off = []
        for level in range(self.levels):
            for step in self._level_steps(level):
                for layer in step:
                    x, delta = layer.forward(x)
                    log_det += delta
            if level < self.levels - 1:
                half = self.dims[level] // 2
                split_off.append(x[:, half:])
                x = x[:, :half]
        return tf.concat(split_off + [x], axis=1), log_det

    def inverse(self, z):
        """The vectors `x` whose latent is `z` (`forward`'s inverse)."""
        z = tf.cast(z, self.compute_dtype)
        pieces, begin = [], 0
        for level in range(self.levels - 1):
            size = self.dims[level] - self.dims[level] // 2
            pieces.append(z[:, begin : begin + size])
            begin += size
        x = z[:, begin:]
        for level in reversed(range(self.levels)):
            if level < self.levels - 1:
                x = tf.concat([x, pieces[level]], axis=1)
            for step in reversed(self._level_steps(level)):
                for layer in reversed(step):
                    x = layer.inverse(x)
        return x

    def log_prob(self, x):
        """`log p(x)` in nats `[B]`: standard normal log density of `z` plus `log_det`."""
        z, log_det = self.forward(x)
        prior = -0.5 * tf.reduce_sum(tf.square(z), axis=1) - 0.5 * self.input_dim * math.log(
            2 * math.pi
        )
        return prior + log_det

    def initialize(self, x):
        """Glow's data-dependent init: every actnorm gives zero mean, unit variance on `x`."""
        x = tf.cast(x, self.compute_dtype)
        for level in range(self.levels):
            for step in self._level_steps(level):
                step[0].initialize(x.numpy())
                for layer in step:
                    x, _ = layer.forward(x)
            if level < self.levels - 1:
                x = x[:, : self.dims[level] // 2]

    def call(self, x):
        return self.forward(x)[0]

    def get_config(self):
        config = super().get_config()
        config.update({
            "levels": self.levels,
            "depth": self.depth,
            "coupling_width": self.coupling_width,
            "coupling": self.coupling,
            "permutation": self.permutation,
            "seed": self.seed,
        })
        return config

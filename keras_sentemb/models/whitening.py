"""`Whitening`: BERT-whitening of sentence vectors (Su et al., 2021)."""

import keras
import numpy as np
from keras import ops

from keras_sentemb import validation
from keras_sentemb.models.post_processing import PostProcessing


def whitening_weights(vectors, dim=None):
    """Mean and whitening kernel of a set of vectors (Su et al., 2021).

    With `mu` the mean and `U diag(s) U^T` the SVD of the covariance (unbiased,
    as `np.cov`), the kernel is `W = U diag(1 / sqrt(s))`; keeping its first
    `dim` columns keeps the directions of largest variance. On the fitting
    set, `(x - mu) @ W` has mean zero and identity covariance.

    `dim=None` keeps every direction the vectors span: the rank of their
    covariance, which is `d - 1` for vectors pooled from one layer of a
    Transformer (a LayerNorm's outputs lie in a hyperplane, and so do their
    averages), so that no direction of zero variance is divided by ~0.

    Args:
        vectors: array-like `[n, d]`.
        dim: int or None. Columns kept (`k`). Defaults to `None` (all the
            directions of non-zero variance).

    Returns:
        `(mean [d], kernel [d, dim])`, float64 numpy arrays.

    Raises:
        ValueError: for fewer than 2 vectors, `dim` out of `[1, d]`, or a
            covariance of rank below `dim` (too few or degenerate vectors).

    Examples:

    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=(500, 4)) @ rng.normal(size=(4, 4))
    >>> mean, kernel = whitening_weights(x, dim=2)
    >>> kernel.shape
    (4, 2)
    >>> bool(np.allclose(np.cov(((x - mean) @ kernel).T), np.eye(2)))
    True
    """
    x = np.asarray(vectors, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 2:
        raise ValueError(
            f"Whitening needs a 2-D array of at least 2 vectors; received shape {x.shape}."
        )
    return whitening_from_moments(VectorMoments().update(x), dim)


class VectorMoments:
    """Count, mean and covariance of vectors seen batch by batch, in constant memory.

    Batches are merged by Chan et al.'s pairwise update of the mean and of
    the sum of squared deviations (in float64), so the result equals
    `np.mean` / `np.cov` of all the rows at once up to rounding, without
    the cancellation of a raw sum of squares; a corpus of any size is
    whitened from one pass over its vectors.

    Examples:

    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=(300, 3))
    >>> moments = VectorMoments().update(x[:100]).update(x[100:])
    >>> bool(np.allclose(moments.covariance(), np.cov(x.T)))
    True
    """

    def __init__(self):
        self.count = 0
        self.mean = None
        self._deviations = None  # sum of (x - mean)(x - mean)^T

    def update(self, vectors):
        """Adds a batch `[n, d]` of vectors; returns `self`."""
        x = np.asarray(vectors, dtype=np.float64)
        if x.ndim != 2:
            raise ValueError(f"Expected a 2-D batch of vectors [n, d]; received shape {x.shape}.")
        if self.mean is not None and x.shape[1] != self.mean.shape[0]:
            raise ValueError(f"Expected vectors of size {self.mean.shape[0]}; received "
                             f"{x.shape[1]}.")
        n = x.shape[0]
        if n == 0:
            return self
        mean = x.mean(axis=0)
        centred = x - mean
        deviations = centred.T @ centred
        if self.mean is None:
            self.count, self.mean, self._deviations = n, mean, deviations
            return self
        total = self.count + n
        delta = mean - self.mean
        self.mean = self.mean + delta * (n / total)
        self._deviations = self._deviations + deviations + np.outer(delta, delta) * (
            self.count * n / total)
        self.count = total
        return self

    def covariance(self):
        """The unbiased covariance `[d, d]` (as `np.cov` of the rows)."""
        if self.count < 2:
            raise ValueError(
                f"Whitening needs at least 2 vectors; received {self.count}.")
        return self._deviations / (self.count - 1)


def whitening_from_moments(moments, dim=None):
    """`whitening_weights` of the vectors summarised by a `VectorMoments`."""
    cov = moments.covariance()
    d = cov.shape[0]
    explicit_dim = dim
    dim = d if dim is None else validation.positive_int(dim, "dim")
    if dim > d:
        raise ValueError(f"`dim` must be in [1, {d}] (the vector size), received {dim}.")
    u, s, _ = np.linalg.svd(cov)
    rank = int(np.sum(s > s[0] * 1e-10)) if s[0] > 0 else 0
    if explicit_dim is None:
        if rank == 0:
            raise ValueError(f"The {moments.count} vectors are all equal: nothing to whiten.")
        dim = rank
    if rank < dim:
        raise ValueError(
            f"The {moments.count} vectors span only {rank} of {d} dimensions; whitening to "
            f"dim={dim} needs at least {dim}. Fit on more sentences or pass dim <= {rank}."
        )
    return moments.mean, u[:, :dim] / np.sqrt(s[:dim])


@keras.saving.register_keras_serializable(package="keras_sentemb")
class Whitening(PostProcessing):
    """Whitening of sentence vectors: `(x - mean) @ kernel`, optionally reduced.

    Su et al. (2021) turn anisotropic BERT sentence vectors into isotropic
    ones by a linear map fitted on a corpus's vectors: subtract the mean and
    multiply by `U diag(1/sqrt(s))` from the SVD of the covariance, keeping the
    first `dim` columns (dimensionality reduction; the paper's "whitening-256"
    keeps 256 of BERT's 768). Use `Whitening.from_vectors` to fit one, or
    `keras_sentemb.fit_whitening` to fit and attach it to an encoder.

    Args:
        input_dim: int. Size of the input vectors.
        dim: int or None. Output size `k`. Defaults to `None` (`input_dim`).
        pooling: str or None. The pooling it was fitted on. Defaults to
            `None`.

    Examples:

    ```python
    vectors = encoder.encode(sentences)                  # [n, 384]
    layer = Whitening.from_vectors(vectors, dim=256, pooling="mean")
    encoder.postprocess = layer                          # encode() now whitens
    ```

    References:
        - [Su et al., 2021. Whitening Sentence Representations for Better
          Semantics and Faster Retrieval](https://arxiv.org/abs/2103.15316)
    """

    def __init__(self, input_dim, dim=None, pooling=None, **kwargs):
        super().__init__(input_dim, pooling=pooling, **kwargs)
        self.dim = None if dim is None else validation.positive_int(dim, "dim")
        if self.dim is not None and self.dim > self.input_dim:
            raise ValueError(
                f"`dim` must be at most input_dim={self.input_dim}, received {dim}."
            )

    @property
    def output_dim(self):
        return self.dim or self.input_dim

    def build(self, input_shape=None):
        self.mean = self.add_weight(
            shape=(self.input_dim,), initializer="zeros", trainable=False, name="mean"
        )
        self.kernel = self.add_weight(
            shape=(self.input_dim, self.output_dim), initializer="zeros", trainable=False,
            name="kernel",
        )
        self.built = True

    def call(self, x):
        return ops.matmul(ops.cast(x, self.compute_dtype) - self.mean, self.kernel)

    @classmethod
    def from_vectors(cls, vectors, dim=None, pooling=None, **kwargs):
        """A `Whitening` fitted on `vectors` `[n, d]` (see `whitening_weights`)."""
        return cls._with_weights(*whitening_weights(vectors, dim), pooling=pooling, **kwargs)

    @classmethod
    def from_moments(cls, moments, dim=None, pooling=None, **kwargs):
        """A `Whitening` fitted on the vectors a `VectorMoments` summarises (a streamed corpus)."""
        return cls._with_weights(*whitening_from_moments(moments, dim), pooling=pooling,
                                 **kwargs)

    @classmethod
    def _with_weights(cls, mean, kernel, pooling=None, **kwargs):
        layer = cls(kernel.shape[0], dim=kernel.shape[1], pooling=pooling, **kwargs)
        layer.build()
        layer.set_weights([mean, kernel])
        return layer

    def get_config(self):
        config = super().get_config()
        config.update({"dim": self.dim})
        return config

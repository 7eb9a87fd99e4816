import numbers

import keras
from keras import ops

from keras_sentemb.augment import _utils


def _validate_positive(value, arg_name, owner):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(
            f"`{arg_name}` of {owner} must be a positive float. "
            f"Received: {arg_name}={value!r} (of type {type(value).__name__})."
        )
    value = float(value)
    if not value > 0.0:
        raise ValueError(
            f"`{arg_name}` of {owner} must be a positive float. "
            f"Received: {arg_name}={value!r}."
        )
    return value


def adversarial_perturbation(
    embeddings, gradients, noise_norm=1.0, epsilon=1e-10, padding_mask=None
):
    """Adds a normalised fast-gradient-value (FGV) perturbation to embeddings.

    Returns `embeddings + noise_norm * g / (||g||_2 + epsilon)` where `g` is
    `gradients` with its gradient stopped and the L2 norm is taken per token
    (over the hidden axis), so every token moves by (almost exactly)
    `noise_norm` in the direction that increases the loss. This is ConSERT's
    adversarial view (`AdvCLSoftmaxLoss` with `do_noise_normalization=True`).
    The gradient flows into `embeddings` as usual; only the noise is
    constant. The norm is computed in float32, so float16 gradients do not
    overflow and loss scaling (which multiplies `g`) cancels out; the result
    has the dtype of `embeddings`.

    Args:
        embeddings: float tensor `[batch, seq_len, hidden]`, the embedding
            output of a first forward pass.
        gradients: float tensor of the same shape, the gradient of the loss
            of that pass with respect to `embeddings`.
        noise_norm: float. Per-token L2 norm of the perturbation. Defaults to
            `1.0` (the `--noise_norm` default of ConSERT's `main.py`).
        epsilon: float. Added to the gradient norm to avoid dividing by zero.
            Defaults to `1e-10` (ConSERT's value).
        padding_mask: optional tensor `[batch, seq_len]`, 1 for real tokens.
            When given, padding rows are not perturbed. Defaults to `None`.

    Returns:
        The perturbed embeddings, same shape and dtype as `embeddings`.

    Examples:

    >>> import numpy as np
    >>> embeddings = np.zeros((1, 2, 2), dtype="float32")
    >>> gradients = np.array([[[3.0, 4.0], [0.0, 2.0]]], dtype="float32")
    >>> np.asarray(adversarial_perturbation(embeddings, gradients, noise_norm=0.5))
    array([[[0.3, 0.4],
            [0. , 0.5]]], dtype=float32)

    References:
        - [Yan et al., 2021. ConSERT: A Contrastive Framework for
          Self-Supervised Sentence Representation Transfer](
          https://arxiv.org/abs/2105.11741) (Section 3.2, "Adversarial
          Attack").
        - [Miyato et al., 2017. Adversarial Training Methods for
          Semi-Supervised Text Classification](
          https://arxiv.org/abs/1605.07725).
    """
    owner = "adversarial_perturbation"
    noise_norm = _validate_positive(noise_norm, "noise_norm", owner)
    epsilon = _validate_positive(epsilon, "epsilon", owner)
    if gradients is None:
        raise ValueError(
            "adversarial_perturbation needs the gradient of the loss with "
            "respect to `embeddings`. Received: gradients=None (is the loss "
            "connected to the embeddings?)."
        )
    embeddings = ops.convert_to_tensor(embeddings)
    gradients = ops.stop_gradient(ops.convert_to_tensor(gradients))
    gradients = ops.cast(gradients, "float32")
    shapes = tuple(gradients.shape), tuple(embeddings.shape)
    if shapes[0] != shapes[1] and None not in shapes[0] + shapes[1]:
        raise ValueError(
            "`gradients` must have the shape of `embeddings`. Received: "
            f"embeddings.shape={tuple(embeddings.shape)}, "
            f"gradients.shape={tuple(gradients.shape)}."
        )
    norm = ops.sqrt(ops.sum(ops.square(gradients), axis=-1, keepdims=True))
    noise = noise_norm * gradients / (norm + epsilon)
    if padding_mask is not None:
        real = _utils.real_token_mask(
            padding_mask, embeddings, "adversarial_perturbation"
        )
        noise = ops.where(ops.expand_dims(real, -1), noise, ops.zeros_like(noise))
    return embeddings + ops.cast(noise, embeddings.dtype)


@keras.saving.register_keras_serializable(package="keras_sentemb")
class AdversarialPerturbation(keras.layers.Layer):
    """Adversarial view: FGV perturbation of the embedding output.

    Given the embedding output of a first forward pass and the gradient of
    that pass's loss with respect to it, returns
    `embeddings + noise_norm * g / (||g||_2 + epsilon)`, with the L2 norm per
    token and `g` gradient-stopped (see `adversarial_perturbation`, the
    functional form). The trainer runs a second forward pass from the
    perturbed embeddings. This is ConSERT's adversarial-attack view.

    It is deterministic (no seed) and, unlike the other views, needs the
    gradient, so it is not in the `make_view` registry; trainers call it
    explicitly (`requires_gradients = True`). It acts on the embedding output
    (`stage = "embeddings"`), keeps the dtype of `embeddings` and is the
    identity when `training=False` (or `None`), returning `embeddings` as is.

    Args:
        noise_norm: float > 0. Per-token L2 norm of the perturbation. Defaults
            to `1.0`, the `--noise_norm` default of ConSERT's `main.py` (the
            constructor of its `AdvCLSoftmaxLoss` defaults to 0.01).
        epsilon: float > 0. Added to the gradient norm to avoid dividing by
            zero. Defaults to `1e-10` (ConSERT's value).
        **kwargs: other keyword arguments passed to `keras.layers.Layer`.

    Call arguments:
        embeddings: float tensor `[batch, seq_len, hidden]`.
        gradients: float tensor of the same shape, d(loss)/d(embeddings).
        padding_mask: optional tensor `[batch, seq_len]`, 1 for real tokens;
            padding rows are then not perturbed. Defaults to `None`.
        training: bool. Perturb only when `True`. Defaults to `None`
            (identity).

    Returns:
        The perturbed embeddings, same shape and dtype as `embeddings`.

    Examples:

    >>> import numpy as np
    >>> layer = AdversarialPerturbation(noise_norm=0.5)
    >>> embeddings = np.zeros((1, 1, 2), dtype="float32")
    >>> gradients = np.array([[[3.0, 4.0]]], dtype="float32")
    >>> np.asarray(layer(embeddings, gradients, training=True))
    array([[[0.3, 0.4]]], dtype=float32)

    References:
        - [Yan et al., 2021. ConSERT: A Contrastive Framework for
          Self-Supervised Sentence Representation Transfer](
          https://arxiv.org/abs/2105.11741) (Section 3.2, "Adversarial
          Attack").
    """

    stage = "embeddings"
    updates_mask = False
    requires_gradients = True

    def __init__(self, noise_norm=1.0, epsilon=1e-10, **kwargs):
        kwargs.setdefault("autocast", False)
        super().__init__(**kwargs)
        self.noise_norm = _validate_positive(
            noise_norm, "noise_norm", type(self).__name__
        )
        self.epsilon = _validate_positive(epsilon, "epsilon", type(self).__name__)

    def call(self, embeddings, gradients, padding_mask=None, training=None):
        _utils.check_embeddings(embeddings, "AdversarialPerturbation")
        if not training:
            return embeddings
        return adversarial_perturbation(
            embeddings,
            gradients,
            noise_norm=self.noise_norm,
            epsilon=self.epsilon,
            padding_mask=padding_mask,
        )

    def compute_output_shape(
        self, embeddings_shape, gradients_shape=None, padding_mask_shape=None
    ):
        return embeddings_shape

    def get_config(self):
        config = super().get_config()
        config.update({"noise_norm": self.noise_norm, "epsilon": self.epsilon})
        return config

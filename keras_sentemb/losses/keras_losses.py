"""Thin, registered `keras.losses.Loss` wrappers of the loss functions.

For use in `model.compile(loss=...)` of a Keras model of your own. Each
takes the embeddings stacked along axis 1 as `y_pred` (row `i` holds the
two or three vectors of example `i`) and returns per-example losses, which
Keras reduces (`"sum_over_batch_size"`: the mean, as the functions'
default). The trainers of this package call the functions directly.

```python
anchors, positives = encoder_a(x), encoder_b(x)
y_pred = keras.ops.stack([anchors, positives], axis=1)   # [batch, 2, dim]
loss = InfoNCELoss(temperature=0.05)(None, y_pred)
```
"""

import math

import keras
import tensorflow as tf

from keras_sentemb.losses.contrastive_tension import contrastive_tension_in_batch_loss
from keras_sentemb.losses.contrastive_tension import contrastive_tension_loss
from keras_sentemb.losses.info_nce import info_nce_loss
from keras_sentemb.losses.nt_xent import nt_xent_loss
from keras_sentemb.losses.regression import cosine_mse_loss


def _columns(y_pred, n, name):
    y_pred = tf.convert_to_tensor(y_pred)
    if y_pred.shape.rank != 3 or (y_pred.shape[1] is not None and y_pred.shape[1] not in n):
        raise ValueError(
            f"{name} expects y_pred of shape [batch, {' or '.join(map(str, n))}, dim] "
            f"(the embeddings stacked on axis 1). Received: shape={y_pred.shape}."
        )
    return [y_pred[:, i] for i in range(y_pred.shape[1])]


class _SentenceLoss(keras.losses.Loss):
    # The constructor arguments kept as attributes and written to the config.
    _config_keys = ()

    def __init__(self, name, reduction="sum_over_batch_size", **kwargs):
        super().__init__(name=name, reduction=reduction, **kwargs)

    def get_config(self):
        config = super().get_config()
        config.update({key: getattr(self, key) for key in self._config_keys})
        return config


@keras.saving.register_keras_serializable(package="keras_sentemb")
class InfoNCELoss(_SentenceLoss):
    """`info_nce_loss` as a Keras loss: y_pred `[B, 2, d]` or `[B, 3, d]`.

    Column 0 holds the anchors, column 1 the positives and the optional
    column 2 hard negatives; `y_true` is ignored.

    Args:
        temperature: float. Defaults to `0.05`.
        hard_negative_weight: float. Defaults to `0.0`.
        similarity: str. `"cosine"` or `"dot"`. Defaults to `"cosine"`.
        symmetric: bool. Defaults to `False`.
    """
    _config_keys = ("temperature", "hard_negative_weight", "similarity", "symmetric")

    def __init__(self, temperature=0.05, hard_negative_weight=0.0, similarity="cosine",
                 symmetric=False, name="info_nce", **kwargs):
        super().__init__(name=name, **kwargs)
        self.temperature = float(temperature)
        self.hard_negative_weight = float(hard_negative_weight)
        self.similarity = similarity
        self.symmetric = bool(symmetric)

    def call(self, y_true, y_pred):
        cols = _columns(y_pred, (2, 3), "InfoNCELoss")
        return info_nce_loss(
            cols[0], cols[1], hard_negatives=cols[2] if len(cols) == 3 else None,
            temperature=self.temperature, hard_negative_weight=self.hard_negative_weight,
            similarity=self.similarity, symmetric=self.symmetric, reduction="none",
        )


@keras.saving.register_keras_serializable(package="keras_sentemb")
class NTXentLoss(_SentenceLoss):
    """`nt_xent_loss` as a Keras loss: y_pred `[B, 2, d]` (the two views).

    Per example the mean of its two views' losses; `y_true` is ignored.

    Args:
        temperature: float. Defaults to `0.1`.
    """
    _config_keys = ("temperature",)

    def __init__(self, temperature=0.1, name="nt_xent", **kwargs):
        super().__init__(name=name, **kwargs)
        self.temperature = float(temperature)

    def call(self, y_true, y_pred):
        a, b = _columns(y_pred, (2,), "NTXentLoss")
        per_view = nt_xent_loss(a, b, temperature=self.temperature, reduction="none")
        half = tf.shape(a)[0]
        return 0.5 * (per_view[:half] + per_view[half:])


@keras.saving.register_keras_serializable(package="keras_sentemb")
class ContrastiveTensionLoss(_SentenceLoss):
    """`contrastive_tension_loss` as a Keras loss: y_pred `[B, 2, d]`, y_true labels `[B]`.

    Column 0 holds tower 1's vectors, column 1 tower 2's; labels are 1 for
    a positive pair and 0 for a negative one.
    """
    def __init__(self, name="contrastive_tension", **kwargs):
        super().__init__(name=name, **kwargs)

    def call(self, y_true, y_pred):
        a, b = _columns(y_pred, (2,), "ContrastiveTensionLoss")
        return contrastive_tension_loss(a, b, tf.reshape(y_true, [-1]), reduction="none")


@keras.saving.register_keras_serializable(package="keras_sentemb")
class ContrastiveTensionInBatchLoss(_SentenceLoss):
    """`contrastive_tension_in_batch_loss` with a fixed scale: y_pred `[B, 2, d]`.

    Args:
        scale: float. Multiplier of the cosine similarities. Defaults to `20.0`.
    """
    _config_keys = ("scale",)

    def __init__(self, scale=20.0, name="contrastive_tension_in_batch", **kwargs):
        super().__init__(name=name, **kwargs)
        self.scale = float(scale)

    def call(self, y_true, y_pred):
        a, b = _columns(y_pred, (2,), "ContrastiveTensionInBatchLoss")
        return contrastive_tension_in_batch_loss(a, b, math.log(self.scale), reduction="none")


@keras.saving.register_keras_serializable(package="keras_sentemb")
class CosineMSELoss(_SentenceLoss):
    """`cosine_mse_loss` as a Keras loss: y_pred `[B, 2, d]`, y_true targets `[B]`."""

    def __init__(self, name="cosine_mse", **kwargs):
        super().__init__(name=name, **kwargs)

    def call(self, y_true, y_pred):
        a, b = _columns(y_pred, (2,), "CosineMSELoss")
        return cosine_mse_loss(a, b, y_true, reduction="none")

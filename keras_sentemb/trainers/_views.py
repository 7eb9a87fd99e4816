"""Forward passes of a `SentenceEncoder` through one augmentation view.

Private helpers shared by the ConSERT and SimCSE trainers. They run the
encoder's own hooks (`embed_tokens`, the backbone's embedding dropout and
Transformer layers, `pool`) so that a view can act at the position ids
(token shuffle) or at the embedding output after LayerNorm (cutoffs,
dropout, adversarial), and so that a view that changes the padding mask
(span cutoff) changes it for attention *and* pooling.
"""

import tensorflow as tf

from keras_sentemb.augment.views import apply_embedding_view
from keras_sentemb.augment.views import apply_position_view


def default_position_ids(token_ids):
    """0..T-1 for every row of `token_ids` [B, T] (int32)."""
    length = tf.shape(token_ids)[1]
    batch = tf.shape(token_ids)[0]
    return tf.tile(tf.range(length, dtype=tf.int32)[None, :], [batch, 1])


def view_hidden_states(
    encoder,
    inputs,
    view=None,
    training=True,
    encoder_dropout=True,
    embedding_hook=None,
):
    """All hidden states of `encoder` on `inputs` seen through `view`.

    Args:
        encoder: `SentenceEncoder`.
        inputs: dict with `token_ids`, `padding_mask` (and optional
            `segment_ids`, `position_ids`).
        view: a view layer from `keras_sentemb.augment` (or `None`).
        training: bool. Whether the view is active.
        encoder_dropout: bool. Whether the backbone's own dropout is active
            (only when `training` is also True).
        embedding_hook: callable or None. Called on the embedding output after
            the view (e.g. to watch it with a tape or add an adversarial
            perturbation); returns the embeddings to use.

    Returns:
        `(states, padding_mask)`: the list of `num_layers + 1` hidden states
        and the padding mask the layers and pooling must use.
    """
    padding_mask = inputs["padding_mask"]
    token_ids = inputs["token_ids"]
    position_ids = inputs.get("position_ids")
    if position_ids is None:
        position_ids = default_position_ids(token_ids)
    position_ids = apply_position_view(
        view, position_ids, padding_mask, training=training
    )
    x = encoder.embed_tokens(token_ids, inputs.get("segment_ids"), position_ids)
    x, padding_mask = apply_embedding_view(view, x, padding_mask, training=training)
    if embedding_hook is not None:
        x = embedding_hook(x)
    dropout = bool(training and encoder_dropout)
    x = encoder.backbone.embeddings_dropout(x, training=dropout)
    states = [x]
    for layer in encoder.backbone.transformer_layers:
        x = layer(x, padding_mask=padding_mask, training=dropout)
        states.append(x)
    return states, padding_mask


def view_embeddings(encoder, inputs, view=None, pooling=None, **kwargs):
    """Float32 sentence vectors of a view: pooled, through the encoder's
    projection head if it has one, not normalised (the losses normalise)."""
    states, padding_mask = view_hidden_states(encoder, inputs, view, **kwargs)
    pooled = encoder.pool(states, padding_mask, pooling)
    return tf.cast(encoder.head(pooled, normalize=False), "float32")

"""Logits of a keras-hub `MaskedLMHead` at chosen positions, without an int64 transpose."""

import tensorflow as tf

from keras_sentemb import compat


def masked_lm_logits(head, states, positions=None):
    """`head`'s logits at `positions` of `states`: `[B, K, vocabulary]`.

    What `head(states, mask_positions=positions)` computes. keras-hub's call
    gathers with `keras.ops.take_along_axis`, which transposes the positions
    as int64, and oneDNN prints an "E0000 ... DT_INT64" line on the first
    such transpose of a process; here the states are gathered with the
    positions as they are (int32) and the head's transform applied to them
    (`compat.masked_lm_head_transform`).

    Args:
        head: a built keras-hub `MaskedLMHead`.
        states: `[B, T, H]` token states.
        positions: `[B, K]` int positions into `T`, or `None` for every
            position (a decoder's next-token logits).
    """
    if positions is not None:
        states = tf.gather(states, positions, batch_dims=1)
    return compat.masked_lm_head_transform(head, states)

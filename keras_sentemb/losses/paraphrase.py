"""Loss of labelled paraphrase pairs (the CS224N multitask report's objective)."""

import tensorflow as tf

from keras_sentemb.losses.info_nce import info_nce_loss
from keras_sentemb.losses.similarity import l2_normalize


def paraphrase_loss(u, v, labels, temperature=0.05, negative_weight=1.0, negative_margin=0.0):
    """InfoNCE on paraphrase pairs plus a push-down of non-paraphrase pairs.

    `positive` is the mean, over pairs labelled 1, of InfoNCE(u_i -> v_i
    among all v of the batch): not-paraphrase partners are in-batch
    negatives too. `negative` is the mean, over pairs labelled 0, of
    `relu(cos(u_i, v_i) - negative_margin)`. A term with no pair in the batch
    is 0.

    Args:
        u: float tensor `[B, D]`. First sentences.
        v: float tensor `[B, D]`. Second sentences.
        labels: tensor `[B]`, 1 for a paraphrase, 0 otherwise.
        temperature: float. InfoNCE temperature. Defaults to `0.05`.
        negative_weight: float. Weight of the push-down term. Defaults to
            `1.0`.
        negative_margin: float. Cosine below which a non-paraphrase pair is
            not pushed. Defaults to `0.0`.

    Returns:
        `(positive + negative_weight * negative, {"positive_loss": positive,
        "negative_loss": negative})`.

    References:
        - Contrastive Learning for Generalizable Sentence Embeddings
          (Stanford CS224N default-project report).
    """
    labels = tf.cast(tf.reshape(labels, [-1]), "float32")
    per_example = info_nce_loss(u, v, temperature=temperature, reduction="none")
    positives = tf.cast(labels > 0.5, "float32")
    negatives = 1.0 - positives
    positive = tf.math.divide_no_nan(
        tf.reduce_sum(per_example * positives), tf.reduce_sum(positives)
    )
    cos = tf.reduce_sum(l2_normalize(u) * l2_normalize(v), axis=-1)
    negative = tf.math.divide_no_nan(
        tf.reduce_sum(tf.nn.relu(cos - negative_margin) * negatives), tf.reduce_sum(negatives)
    )
    loss = positive + negative_weight * negative
    return loss, {"positive_loss": positive, "negative_loss": negative}

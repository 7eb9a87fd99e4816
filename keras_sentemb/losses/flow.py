"""The normalizing flow's loss: negative log-likelihood per dimension."""

import math

import tensorflow as tf


def flow_nll_loss(log_prob, input_dim):
    """Mean negative log-likelihood per dimension (nats), and the same in bits.

    BERT-flow fits a flow by maximum likelihood of the sentence vectors
    under a standard Gaussian in the flow's latent space; dividing by the
    dimension makes the figure comparable across model widths.

    Args:
        log_prob: float tensor `[N]`: `log p(x)` of each vector (the flow's
            `log_prob`, change of variables included).
        input_dim: int. The vectors' dimension.

    Returns:
        `(nll, bits_per_dim)`: float32 scalars.

    Examples:

    >>> nll, bits = flow_nll_loss(tf.constant([-2.0, -4.0]), input_dim=2)
    >>> float(nll), round(float(bits), 4)
    (1.5, 2.164)
    """
    nll = -tf.reduce_mean(tf.cast(log_prob, tf.float32)) / float(input_dim)
    return nll, nll / math.log(2.0)

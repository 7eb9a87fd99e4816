"""A cheap signature of a model's weights: when a copy that follows them must copy again.

`encode` in a precision the encoder does not compute in runs a copy of it (a
bfloat16 twin, the float32 copy that holds int8 weights), and the int8 weights
are derived from the float ones. Copying, or checksumming, every weight at
every call to keep them current costs more than a short request's forward
pass: on the default model (22.7M weights) `get_weights()` alone takes about
65 ms, against about 25 ms for encoding one sentence in float32.

`weights_signature(model)` reads instead, in one traced function, `SAMPLES`
values of every variable at fixed, evenly spaced positions (its first and
last included), beside each variable's identity, shape and dtype. Training
(every optimizer step moves every weight it updates almost everywhere),
`set_weights`, `load_weights` and swapping a layer all change it. What it
cannot see is an assignment by hand that leaves every sampled position as it
was (one row of an embedding table, say); after one, `forget_copies(model)`
changes the signature, and the next call copies again.
"""

import numpy as np
import tensorflow as tf

SAMPLES = 16
_SAMPLER = "_keras_sentemb_weights_sampler"
_FOLLOWS = "_keras_sentemb_follows"  # on a copy: the signature of the weights it holds
_GENERATION = "_keras_sentemb_forgotten"  # how many times `forget_copies` was called


def sample_positions(size, samples=SAMPLES):
    """The flat positions read of a variable of `size` elements: evenly spaced, ends included."""
    if size <= samples:
        return np.arange(size, dtype=np.int64)
    return np.unique(np.linspace(0, size - 1, num=samples).round().astype(np.int64))


def _sampler(variables):
    positions = [tf.constant(sample_positions(int(np.prod(v.shape)))) for v in variables]
    values = [v.value if hasattr(v, "value") else v for v in variables]

    @tf.function(autograph=False)
    def sample():
        if not values:
            return tf.zeros([0], tf.float64)
        return tf.concat([tf.cast(tf.gather(tf.reshape(v, [-1]), p), tf.float64)
                          for v, p in zip(values, positions)], axis=0)

    return sample


def weights_signature(model):
    """A hashable value that changes when `model`'s weights change (see the module docstring).

    Its variables' identities, shapes and dtypes, the bytes of their sampled values and the
    number of times `forget_copies` was called on it; the sampling function is traced once
    per model (and again when its variables change).
    """
    variables = list(model.weights)
    layout = tuple((id(v), tuple(v.shape), str(v.dtype)) for v in variables)
    cached = model.__dict__.get(_SAMPLER)
    if cached is None or cached[0] != layout:
        cached = (layout, _sampler(variables))
        object.__setattr__(model, _SAMPLER, cached)  # a plain attribute: not tracked by Keras
    return layout, cached[1]().numpy().tobytes(), model.__dict__.get(_GENERATION, 0)


def follow_weights(copy, source):
    """Copy `source`'s weights into `copy` when they changed since `copy` last took them.

    `copy` remembers the signature of the weights it holds (a copy made by `clone` holds the
    source's at its making, and takes it then).
    """
    signature = weights_signature(source)
    if copy.__dict__.get(_FOLLOWS) != signature:
        if _FOLLOWS in copy.__dict__:  # made before: its weights are the source's earlier ones
            copy.set_weights(source.get_weights())
            forget_copies(copy)  # what is derived from the copy follows too
        object.__setattr__(copy, _FOLLOWS, signature)


def forget_copies(model):
    """Make the copies that follow `model`'s weights copy them again at their next use.

    Needed only after an assignment by hand that leaves every sampled value as it was: it
    changes `model`'s signature, so its bfloat16 copy and its int8 weights are made again.
    """
    object.__setattr__(model, _GENERATION, model.__dict__.get(_GENERATION, 0) + 1)

"""An encoder's Transformer switched to another compute dtype in place, and back.

Mixed-precision training (`precision="bfloat16"`, the default `"auto"` on a
CPU that computes bfloat16 natively) trains the caller's encoder itself:
every layer of its backbone computes under the `mixed_bfloat16` policy for
the run (bfloat16 compute, the same float32 variables, so the optimizer
state and the update stay float32) and is set back to its own policy when
the run ends, normally or not. Keras reads a layer's compute dtype each time
the layer is called, so the switch is exactly what rebuilding the backbone
with that policy gives (`clone(dtype=...)`, checked by
tests/models/test_compute_policy.py), without a copy of the weights and
with `fit_*` training the encoder it was given, as it does in float32.

The projection head, the pooling and the losses keep their own policy:
they see the backbone's outputs cast to float32.
"""

import keras

from keras_sentemb import compat


def _switchable_layers(backbone):
    # Input layers carry the dtype of the token ids, not a compute dtype.
    return [layer for layer in compat.all_layers(backbone)
            if not isinstance(layer, keras.layers.InputLayer)]


def switch_compute_policy(encoder, policy):
    """Set every layer of `encoder.backbone` to the dtype policy `policy`; return `restore`.

    Args:
        encoder: a `SentenceEncoder` whose backbone computes in float32.
        policy: str. A Keras dtype policy with float32 variables, e.g.
            `"mixed_bfloat16"`.

    Returns:
        A function of no arguments that sets each layer back to the policy
        it had and forgets the precision copies `encode` made meanwhile
        (they were copies of the switched encoder). Calling it again does
        nothing.
    """
    policy = keras.dtype_policies.get(policy)
    if policy.variable_dtype != "float32":
        raise ValueError(f"A policy that keeps float32 variables is needed to train in place; "
                         f"received {policy.name!r}.")
    before = [(layer, layer.dtype_policy) for layer in _switchable_layers(encoder.backbone)]
    for layer, _ in before:
        layer.dtype_policy = policy
    _forget_precision_copies(encoder)

    def restore():
        while before:
            layer, own = before.pop()
            layer.dtype_policy = own
        _forget_precision_copies(encoder)

    return restore


def _forget_precision_copies(encoder):
    # `precision_twin` caches a copy per precision, chosen by the backbone's
    # policy when it was made; a policy switch makes them wrong or needless.
    encoder.__dict__.get("_precision_twins", {}).clear()

"""Kernels installed on layer objects: a layer's `call` replaced on the object, not its class.

Why on the object. keras-hub builds its backbones from its own layer classes and
Keras' (`TransformerEncoder`, `Dense`, `Dropout`, `LayerNormalization`,
`Embedding`) inside a functional model, and saves, clones and loads them by class
name and config. A subclass would write this package's class names into every
saved config (folders that load only where keras_sentemb is imported, exports
that expect the stock layers), and a method replaced on the class would change
every such layer in the process, the user's own models included. Bound to the
object, a replacement changes only the encoder's own layers: `type(layer)` and
`get_config()` stay keras-hub's / Keras', and `Layer.__call__` finds the
object's `call` first. Each replacement falls back to its class's `call`
(`type(self).call(self, ...)`) wherever its kernel does not apply.

Every kernel module binds and removes its call here (`bind_call`, `unbind_call`,
`patch_calls`); `install.install_kernels` is the one place that installs them
for an encoder.
"""

import types

from keras_sentemb import compat
from keras_sentemb.kernels import policy as kernel_policy


def bind_call(layer, call, policy=None):
    """Make `call` (a function taking the layer first) the `call` of the object `layer`.

    `policy` (a `kernel_policy.KernelPolicy`, or None) is attached to the
    layer first, for `call` to read (`kernel_policy.policy_of`).

    Args:
        layer: a Keras layer object.
        call: function `(layer, inputs, ...)` with the signature of the
            class's `call`.
        policy: a `kernel_policy.KernelPolicy` or None (nothing attached).
            Defaults to `None`.

    Returns:
        bool: whether the layer was not already running `call` (idempotent).
    """
    if policy is not None:
        kernel_policy.attach(layer, policy)
    if is_patched(layer, call):
        return False
    layer.call = types.MethodType(call, layer)
    return True


def unbind_call(layer):
    """Give `layer` back its class's `call`; returns whether it had a call of its own."""
    return layer.__dict__.pop("call", None) is not None


def patch_calls(model, applies, call, policy=None):
    """`bind_call(layer, call, policy)` on every layer of `model` for which `applies(layer)`.

    Idempotent: a layer already running `call` keeps it (its policy is
    updated). Returns how many layers were newly patched.
    """
    count = 0
    for layer in compat.all_layers(model):
        if applies(layer) and bind_call(layer, call, policy):
            count += 1
    return count


def is_patched(layer, call):
    """Whether `layer`'s own `call` is `call` bound to it."""
    bound = layer.__dict__.get("call")
    return getattr(bound, "__func__", None) is call

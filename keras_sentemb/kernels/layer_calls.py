"""Per-object replacements of a Keras layer's `call`, as the speed-ups install them.

The layer's class and config stay as they are, so saving, cloning and
`from_config` see Keras' own layer; only the object's `call` changes.
`install.install_kernels` is the one place that installs them for an encoder.
"""

import types

from keras_sentemb import compat
from keras_sentemb.kernels import policy as kernel_policy


def patch_calls(model, applies, call, policy=None):
    """Bind `call` as the `call` of every layer of `model` for which `applies(layer)`.

    `policy` (a `kernel_policy.KernelPolicy`, or None) is attached to each such
    layer for `call` to read (`kernel_policy.policy_of`). Idempotent: a layer
    already running `call` is skipped (its policy is updated). Returns how
    many layers were patched.
    """
    count = 0
    for layer in compat.all_layers(model):
        if not applies(layer):
            continue
        if policy is not None:
            kernel_policy.attach(layer, policy)
        if not is_patched(layer, call):
            layer.call = types.MethodType(call, layer)
            count += 1
    return count


def is_patched(layer, call):
    """Whether `layer`'s own `call` is `call` bound to it."""
    bound = layer.__dict__.get("call")
    return getattr(bound, "__func__", None) is call

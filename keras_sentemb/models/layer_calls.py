"""Per-object replacements of a Keras layer's `call`, as the speed-ups install them.

The layer's class and config stay as they are, so saving, cloning and
`from_config` see Keras' own layer; only the object's `call` changes.
"""

import types


def patch_calls(model, applies, call):
    """Bind `call` as the `call` of every layer of `model` for which `applies(layer)`.

    Idempotent: a layer already running `call` is skipped. Returns how many
    layers were patched.
    """
    count = 0
    for layer in model._flatten_layers(include_self=True, recursive=True):
        if applies(layer) and not is_patched(layer, call):
            layer.call = types.MethodType(call, layer)
            count += 1
    return count


def is_patched(layer, call):
    """Whether `layer`'s own `call` is `call` bound to it."""
    bound = layer.__dict__.get("call")
    return getattr(bound, "__func__", None) is call

"""`initializers_deferred()`: build a model whose weights are loaded next without drawing random ones.

keras-hub's `Backbone.from_preset` builds the backbone, which runs every
weight's initializer (all-MiniLM-L6-v2: 11.7 million truncated-normal draws
for the token embedding alone), and then overwrites every weight with the
checkpoint's. On a small model that random initialisation is about half of
the load time of a cold `keras-sentemb encode`.

Inside `initializers_deferred()` a Keras variable created with an
initializer starts as zeros (a memset) and is remembered; assigning it (as
weight loading does) makes it an ordinary variable. On leaving the scope,
every remembered variable that was never assigned gets its initializer's
value then. Keras' built-in random initializers are stateless (each holds
the seed it drew when it was constructed), so such a variable ends with the
value it would have had without the scope. Only variables created by the
thread that entered the scope are deferred.

It relies on two private methods of Keras' TensorFlow `Variable`, reached
through `keras_sentemb.compat.patch_variable_init`; where they are missing
(another Keras version) the scope does nothing and variables are
initialised as usual.
"""

import contextlib
import threading

from keras_sentemb import compat

_state = threading.local()


_PATCH_LOCK = threading.Lock()
_PATCHED = {"count": 0, "restore": None}


def _on_initialize(variable, initializer, initialize, set_value):
    import tensorflow as tf

    pending = getattr(_state, "pending", None)
    if pending is None:
        return initialize()
    set_value(tf.zeros(variable.shape, dtype=variable.dtype))
    pending[id(variable)] = (variable, initializer)


def _on_assign(variable):
    pending = getattr(_state, "pending", None)
    if pending:
        pending.pop(id(variable), None)


def _install():
    """Patch Keras once (process-wide, reference-counted); deferral applies per thread."""
    with _PATCH_LOCK:
        _PATCHED["count"] += 1
        if _PATCHED["count"] == 1:
            _PATCHED["restore"] = compat.patch_variable_init(_on_initialize, _on_assign)


def _uninstall():
    with _PATCH_LOCK:
        _PATCHED["count"] -= 1
        if _PATCHED["count"] == 0:
            _PATCHED["restore"]()
            _PATCHED["restore"] = None


@contextlib.contextmanager
def initializers_deferred():
    """Variables created inside start as zeros; those never assigned are initialised on exit.

    For building a model whose weights are loaded right after (see the
    module docstring). Nested scopes join the outer one.

    Examples:

    ```python
    with initializers_deferred():
        backbone = keras_hub.models.Backbone.from_preset(folder)
    ```
    """
    if not compat.has_variable_init_hooks() or getattr(_state, "pending", None) is not None:
        yield
        return
    _install()
    _state.pending = {}
    completed = False
    try:
        yield
        completed = True
    finally:
        pending = _state.pending
        _state.pending = None
        _uninstall()
    if completed:
        _initialize_unassigned(pending.values())


def _initialize_unassigned(entries):
    """Give each never-assigned variable its initializer's value.

    A variable still exactly zero is one nothing wrote (a write that went
    around Keras' `assign` would show as a non-zero value, and is kept).
    """
    for variable, initializer in entries:
        if variable.numpy().any():
            continue
        variable.assign(initializer(variable.shape, dtype=variable.dtype))

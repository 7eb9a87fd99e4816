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

It relies on two methods of Keras' TensorFlow `Variable`
(`_initialize_with_initializer`, `_direct_assign`); where they are missing
(another Keras version) the scope does nothing and variables are
initialised as usual.
"""

import contextlib
import threading

_state = threading.local()


def _variable_class():
    import keras

    cls = getattr(keras, "Variable", None)
    if cls is None or not all(
        hasattr(cls, name) for name in ("_initialize_with_initializer", "_direct_assign",
                                         "_initialize")
    ):
        return None
    return cls


_PATCH_LOCK = threading.Lock()
_PATCHED = {"count": 0, "originals": None}


def _install(cls):
    """Patch `cls` once (process-wide, reference-counted); deferral applies per thread."""
    import tensorflow as tf

    with _PATCH_LOCK:
        _PATCHED["count"] += 1
        if _PATCHED["count"] > 1:
            return
        init_original = cls._initialize_with_initializer
        assign_original = cls._direct_assign
        _PATCHED["originals"] = (init_original, assign_original)

        def _initialize_with_initializer(self, initializer):
            pending = getattr(_state, "pending", None)
            if pending is None:
                return init_original(self, initializer)
            self._initialize(tf.zeros(self._shape, dtype=self._dtype))
            pending[id(self)] = (self, initializer)

        def _direct_assign(self, value):
            pending = getattr(_state, "pending", None)
            if pending:
                pending.pop(id(self), None)
            return assign_original(self, value)

        cls._initialize_with_initializer = _initialize_with_initializer
        cls._direct_assign = _direct_assign


def _uninstall(cls):
    with _PATCH_LOCK:
        _PATCHED["count"] -= 1
        if _PATCHED["count"] == 0:
            cls._initialize_with_initializer, cls._direct_assign = _PATCHED["originals"]
            _PATCHED["originals"] = None


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
    cls = _variable_class()
    if cls is None or getattr(_state, "pending", None) is not None:
        yield
        return
    _install(cls)
    _state.pending = {}
    completed = False
    try:
        yield
        completed = True
    finally:
        pending = _state.pending
        _state.pending = None
        _uninstall(cls)
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

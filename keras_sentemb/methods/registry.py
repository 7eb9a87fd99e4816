"""The registry of training methods: built-in ones and those other packages add.

A method is a `Method` subclass registered under a name with
`@register_method("name")`. The built-in methods live one per module in
`keras_sentemb.methods`; other packages register theirs by being imported,
or, to appear in `keras-sentemb train` once installed, through the entry-point
group `keras_sentemb.methods` (each entry names the module, or the class, that
registers the method):

```toml
[project.entry-points."keras_sentemb.methods"]
my_method = "my_package.my_method"
```

Looking a name up imports only that method's module; `list_methods()` names
every method without importing TensorFlow.
"""

import importlib
import importlib.metadata
import logging
import re

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "keras_sentemb.methods"

# Built-in methods: name -> the module that registers it (imported on first use).
BUILTIN_METHODS = {
    "ct": "keras_sentemb.methods.contrastive_tension",
    "simcse": "keras_sentemb.methods.simcse",
    "consert": "keras_sentemb.methods.consert",
    "sg": "keras_sentemb.methods.self_guided",
    "parallel": "keras_sentemb.methods.parallel",
    "multitask": "keras_sentemb.methods.multitask",
    "sts": "keras_sentemb.methods.sts_regression",
    "mlm": "keras_sentemb.methods.masked_language_model",
    "whitening": "keras_sentemb.methods.whitening",
    "flow": "keras_sentemb.methods.bert_flow",
}

_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")
_REGISTERED = {}


class UnknownMethodError(ValueError):
    """No method is registered under the name asked for."""


def register_method(name):
    """Class decorator: registers a `Method` subclass under `name`.

    Args:
        name: str. Lower case letters, digits, `_` and `-`, starting with a
            letter; the name of `keras-sentemb train NAME` and of
            `keras_sentemb.fit(NAME, ...)`.

    Returns:
        The decorator; it returns the class unchanged (its `name` set).

    Examples:

    ```python
    @register_method("my_method")
    class MyMethod(Method):
        ...
    ```
    """
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"a method name is lower case letters, digits, '_' and '-', starting "
                         f"with a letter. Received: {name!r}.")

    def decorate(cls):
        from keras_sentemb.methods.method import Method

        if not (isinstance(cls, type) and issubclass(cls, Method)):
            raise TypeError(f"@register_method({name!r}) decorates a Method subclass; "
                            f"received {cls!r}")
        builtin = BUILTIN_METHODS.get(name)
        if builtin is not None and cls.__module__ != builtin:
            raise ValueError(f"{name!r} is a built-in method ({builtin}); choose another name")
        taken = _REGISTERED.get(name)
        if taken is not None and taken is not cls and _qualname(taken) != _qualname(cls):
            raise ValueError(f"the method name {name!r} is taken by {_qualname(taken)}")
        cls.name = name
        cls.check_definition()
        _REGISTERED[name] = cls
        return cls

    return decorate


def _qualname(cls):
    return f"{cls.__module__}.{cls.__qualname__}"


def _entry_points():
    try:
        return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}
    except Exception as error:  # a broken installed distribution must not break the CLI
        logger.warning("cannot read the %s entry points: %s", ENTRY_POINT_GROUP, error)
        return {}


def list_methods():
    """The names of every training method: built-in, registered, and installed plugins.

    Returns:
        a sorted list of str; built-in methods first, in their usual order.

    Examples:

    ```python
    keras_sentemb.list_methods()
    # ['ct', 'simcse', 'consert', 'sg', 'parallel', 'multitask', 'sts', 'mlm', 'whitening', 'flow']
    ```
    """
    others = (set(_REGISTERED) | set(_entry_points())) - set(BUILTIN_METHODS)
    return list(BUILTIN_METHODS) + sorted(others)


def get_method(name):
    """The `Method` class registered under `name` (importing its module on first use).

    Args:
        name: str or a `Method` subclass (returned as is).

    Raises:
        UnknownMethodError: no such method; the message lists the known ones.
    """
    from keras_sentemb.methods.method import Method

    if isinstance(name, type) and issubclass(name, Method):
        return name
    if name in _REGISTERED:
        return _REGISTERED[name]
    if name in BUILTIN_METHODS:
        importlib.import_module(BUILTIN_METHODS[name])
    else:
        entry = _entry_points().get(name)
        if entry is not None:
            entry.load()  # a module that registers the method, or the class itself
    if name not in _REGISTERED:
        raise UnknownMethodError(f"unknown training method {name!r}; known methods: "
                                 f"{', '.join(list_methods())}")
    return _REGISTERED[name]

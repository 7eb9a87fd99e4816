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
every method without importing TensorFlow. A plugin that fails to import is
a one-line `PluginError` naming its entry point, its distribution and the
error when it is asked for (`keras-sentemb train NAME`), and is listed as
such by `list_methods(verbose=True)`; the other methods work as before.
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
    "static": "keras_sentemb.methods.static",
}

_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")
_REGISTERED = {}


class UnknownMethodError(ValueError):
    """No method is registered under the name asked for."""


class PluginError(ImportError):
    """An installed plugin's entry point failed to load; the message names it (one line).

    Args:
        method: str. The method's name (the entry point's).
        detail: str. The entry point, its distribution and what went wrong
            (kept as `detail`).
    """

    def __init__(self, method, detail):
        super().__init__(f"the training method {method!r} cannot be loaded: {detail}")
        self.detail = detail


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


def _distribution(entry):
    """`"NAME VERSION"` of the distribution that installed an entry point, or None."""
    dist = getattr(entry, "dist", None)
    if dist is None:
        return None
    try:
        return f"{dist.metadata['Name']} {dist.version}"
    except Exception:  # a broken METADATA file must not hide the entry point's own error
        return getattr(dist, "name", None)


def describe_entry_point(entry):
    """`"entry point NAME = VALUE (distribution D V)"`: where a plugin method comes from."""
    dist = _distribution(entry)
    where = f" (distribution {dist})" if dist else ""
    return f"entry point {entry.name} = {entry.value}{where}"


def load_plugin(entry):
    """Load an installed plugin's entry point (a module or class that registers a method).

    Raises:
        PluginError: it failed to import or to register; the one-line message
            names the entry point, its distribution and the error.
    """
    try:
        entry.load()
    except Exception as error:  # whatever a third-party import raises
        summary = f"{type(error).__name__}: {error}".splitlines()[0]
        raise _plugin_error(entry, f"failed ({summary})") from error
    if entry.name not in _REGISTERED:
        raise _plugin_error(entry, "registers no method of that name")


def _plugin_error(entry, what):
    return PluginError(entry.name, f"{describe_entry_point(entry)} {what}")


def _method_line(name, entries):
    """How `list_methods(verbose=True)` describes one method."""
    if name in BUILTIN_METHODS:
        return f"built-in ({BUILTIN_METHODS[name]})"
    if name in _REGISTERED:
        origin = f"registered ({_qualname(_REGISTERED[name])})"
        return origin if name not in entries else f"plugin, {describe_entry_point(entries[name])}"
    try:
        load_plugin(entries[name])
    except PluginError as error:
        return f"plugin that fails to load: {error.detail}"
    return f"plugin, {describe_entry_point(entries[name])}"


def list_methods(verbose=False):
    """The names of every training method: built-in, registered, and installed plugins.

    Listing reads the installed entry points without importing them (nor
    TensorFlow); a plugin that fails to load is still listed, and never hides
    the others. `verbose=True` imports each plugin and says where every
    method comes from, a plugin that fails to load with its entry point, its
    distribution and the error.

    Args:
        verbose: bool. Describe each method instead of naming it. Defaults
            to `False`.

    Returns:
        list of str (built-in methods first, in their usual order, then the
        others sorted), or with `verbose` a dict name -> one-line description.

    Examples:

    ```python
    keras_sentemb.list_methods()
    # ['ct', 'simcse', 'consert', 'sg', 'parallel', 'multitask', 'sts', 'mlm', 'whitening', 'flow',
    #  'static']
    keras_sentemb.list_methods(verbose=True)["simcse"]
    # 'built-in (keras_sentemb.methods.simcse)'
    ```
    """
    entries = _entry_points()
    others = (set(_REGISTERED) | set(entries)) - set(BUILTIN_METHODS)
    names = list(BUILTIN_METHODS) + sorted(others)
    if not verbose:
        return names
    return {name: _method_line(name, entries) for name in names}


def get_method(name):
    """The `Method` class registered under `name` (importing its module on first use).

    Args:
        name: str or a `Method` subclass (returned as is).

    Raises:
        UnknownMethodError: no such method; the message lists the known ones.
        PluginError: the installed plugin of that name fails to load (one
            line naming its entry point, distribution and error).
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
            load_plugin(entry)  # a module that registers the method, or the class itself
    if name not in _REGISTERED:
        raise UnknownMethodError(f"unknown training method {name!r}; known methods: "
                                 f"{', '.join(list_methods())}")
    return _REGISTERED[name]

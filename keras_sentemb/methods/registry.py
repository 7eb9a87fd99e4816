"""The registry of training methods: built-in ones and those other packages add.

A method is a `Method` subclass registered under a name with
`@register_method("name")`. The built-in methods live one per module or
folder in `keras_sentemb.methods` (config, presets, method and trainer
together), found by reading their `@register_method` lines, so adding one
touches its own place only; other packages register theirs by being imported,
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
such by `list_methods(verbose=True)`; the other methods work as before. An
entry point must be named as the method its module registers: one listed as
`x` whose module registers `y` is refused with one line saying so.
"""

import ast
import importlib
import importlib.metadata
import logging
import pathlib
import re

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "keras_sentemb.methods"

# The modules of this package that define how methods are written, not methods.
_FRAMEWORK = ("method", "options", "registry", "runner", "testing")


def _method_sources(folder, package):
    """`(module name, source)` of each method in `folder`: a folder of its own (or a module)."""
    for path in sorted(pathlib.Path(folder).iterdir()):
        if path.is_dir() and (path / "__init__.py").is_file():
            module, source = path.name, path / "__init__.py"
        elif path.suffix == ".py" and path.stem not in _FRAMEWORK + ("__init__",):
            module, source = path.stem, path
        else:
            continue
        yield f"{package}.{module}", source.read_text(encoding="utf-8")


def _registered_name(decorator):
    """`"name"` of a `@register_method("name")` decorator node, else None."""
    if not (isinstance(decorator, ast.Call) and len(decorator.args) == 1
            and not decorator.keywords):
        return None
    func = decorator.func
    called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
    arg = decorator.args[0]
    if called == "register_method" and isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    return None


def _declarations(source):
    """`(method names, fit function names)` declared at the top level of a module's source.

    Only real statements count: a class decorated with `@register_method("name")`,
    a `def fit_*` or a `fit_* = ...` assignment at the module's top level. An
    example in a docstring or a comment is text, not a statement, and is not read.
    """
    names, functions = [], []
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef):
            names += [n for n in map(_registered_name, node.decorator_list) if n]
        elif isinstance(node, ast.FunctionDef) and node.name.startswith("fit_"):
            functions.append(node.name)
        elif isinstance(node, ast.Assign):
            functions += [t.id for t in node.targets
                          if isinstance(t, ast.Name) and t.id.startswith("fit_")]
    return names, functions


def builtin_declarations(folder=None, package=__package__):
    """`(methods, fit_functions)` read from the built-in methods' own sources.

    A built-in method is a folder of `keras_sentemb.methods` whose
    `__init__.py` declares it with `@register_method("name")` on a class and
    its `fit_*` function at the top level; nothing else lists it. The sources
    are parsed (`ast`), not imported, so naming them imports nothing (nor
    TensorFlow), and an example in a docstring is not a declaration.

    Args:
        folder: path or None. The package folder to read; None is this
            package's (`keras_sentemb/methods`).
        package: str. The folder's package name.

    Returns:
        `({name: module}, {fit function name: module})`, sorted by name.
    """
    names, functions = {}, {}
    folder = pathlib.Path(__file__).resolve().parent if folder is None else folder
    for module, source in _method_sources(folder, package):
        declared, fits = _declarations(source)
        for name in declared:
            names[name] = module
        for function in fits:
            functions[function] = module
    return dict(sorted(names.items())), dict(sorted(functions.items()))


# Built-in methods: name -> the module that registers it (imported on first use).
BUILTIN_METHODS, BUILTIN_FIT_FUNCTIONS = builtin_declarations()

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
    if entry.name in _REGISTERED:
        return
    module = entry.value.partition(":")[0].strip()
    others = sorted(name for name, cls in _REGISTERED.items() if cls.__module__ == module)
    if others:
        listed = ", ".join(map(repr, others))
        raise _plugin_error(entry, f"registers {listed}, not {entry.name!r} (an entry point's "
                                   "name must be the name its module registers)")
    raise _plugin_error(entry, "registers no method of that name")


def _plugin_error(entry, what):
    return PluginError(entry.name, f"{describe_entry_point(entry)} {what}")


def _method_line(name, entries):
    """How `list_methods(verbose=True)` describes one method (and names its presets)."""
    if name in BUILTIN_METHODS:
        line = f"built-in ({BUILTIN_METHODS[name]})"
    elif name in _REGISTERED:
        origin = f"registered ({_qualname(_REGISTERED[name])})"
        line = origin if name not in entries else f"plugin, {describe_entry_point(entries[name])}"
    else:
        try:
            load_plugin(entries[name])
        except PluginError as error:
            return f"plugin that fails to load: {error.detail}"
        line = f"plugin, {describe_entry_point(entries[name])}"
    presets = list(get_method(name).presets)
    return f"{line}; presets: {', '.join(presets)}" if presets else line


def list_methods(verbose=False):
    """The names of every training method: built-in, registered, and installed plugins.

    Listing reads the installed entry points without importing them (nor
    TensorFlow); a plugin that fails to load is still listed, and never hides
    the others. `verbose=True` imports every method and says where each
    comes from and the names of its presets (the papers' settings), a plugin
    that fails to load with its entry point, its distribution and the error.

    Args:
        verbose: bool. Describe each method instead of naming it. Defaults
            to `False`.

    Returns:
        list of str (built-in methods first, sorted by name, then the
        others sorted), or with `verbose` a dict name -> one-line description.

    Examples:

    ```python
    keras_sentemb.list_methods()
    # ['consert', 'ct', 'esimcse', 'flow', 'mlm', 'multitask', 'parallel', 'sg', 'simcse',
    #  'static', 'sts', 'whitening']
    keras_sentemb.list_methods(verbose=True)["simcse"]
    # 'built-in (keras_sentemb.methods.simcse); presets: unsup-bert-base'
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

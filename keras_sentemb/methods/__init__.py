"""Training methods as registered objects: one class per method, one runner.

`register_method`, `Method`, `MethodConfig`, `option` and `Preset` define a
method; `fit(name, data, ...)` trains with any of them; `list_methods()` names
them all. Each built-in method is one folder of this package (its config and
presets, its registered class and `fit_*` function, its trainer), or one
module for a method without a trainer; the registry finds them by reading
their `@register_method("name")` lines.
"""

from keras_sentemb.lazy_exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "Method": f"{__name__}.method",
    "Preset": f"{__name__}.method",
    "MethodConfig": f"{__name__}.options",
    "PluginError": f"{__name__}.registry",
    "UnknownMethodError": f"{__name__}.registry",
    "fit": f"{__name__}.runner",
    "get_method": f"{__name__}.registry",
    "list_methods": f"{__name__}.registry",
    "option": f"{__name__}.options",
    "register_method": f"{__name__}.registry",
})

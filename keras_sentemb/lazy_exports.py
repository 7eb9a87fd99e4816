"""Package faces that load their modules on first use (PEP 562).

`import keras_sentemb` and the command line's start stay fast because a
package's public names, and its submodules, are imported only when code
first reads them: `keras_sentemb.fit_ct`, `keras_sentemb.evaluation.sts`.
The import graph stays visible at the top of each module that uses them.
"""

import importlib
import sys


def lazy_exports(package, names):
    """`(__getattr__, __dir__, __all__)` for a package's `__init__`.

    Args:
        package: str. The package's `__name__`.
        names: dict public name -> the module that defines it.

    Returns:
        The three module attributes; a name in `names` is imported from its
        module when first read, and any other attribute that is a submodule
        of `package` is imported as such.

    Examples:

    ```python
    __getattr__, __dir__, __all__ = lazy_exports(__name__, {"evaluate_sts": f"{__name__}.sts"})
    ```
    """

    def __getattr__(name):
        module = names.get(name)
        if module is not None:
            return getattr(importlib.import_module(module), name)
        if not name.startswith("__"):
            try:
                return importlib.import_module(f"{package}.{name}")
            except ModuleNotFoundError as e:
                if e.name != f"{package}.{name}":
                    raise
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__():
        return sorted(set(names) | set(vars(sys.modules[package])))

    return __getattr__, __dir__, sorted(names)

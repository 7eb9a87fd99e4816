"""Optional dependencies: imported where a feature needs them, or one line on how to install them.

The retrieval metrics (pytrec_eval), the approximate index (faiss), the
Beam pipeline (Apache Beam) and MTEB's evaluators (mteb) need packages that `pip install -e .` does not
install; each comes with an extra of setup.py. When one is missing, the
feature raises `MissingDependencyError`, whose message is one line with the
pip command (the command line prints it as such, without a traceback).
"""

import importlib
import importlib.util
import sys

# extra of setup.py -> the packages it installs (pip names).
EXTRAS = {
    "retrieval": ("pytrec-eval-terrier", "faiss-cpu"),
    "beam": ("apache-beam",),
    "parquet": ("pyarrow",),
    "mteb": ("mteb",),
}
# module -> the pip package that provides it.
PACKAGES = {
    "pytrec_eval": "pytrec-eval-terrier", "faiss": "faiss-cpu", "apache_beam": "apache-beam",
    "pyarrow": "pyarrow",
}


class MissingDependencyError(ImportError):
    """An optional package a feature needs is not installed (a one-line message).

    A subclass of `ImportError`, so code that catches `ImportError` keeps
    working.
    """


def install_hint(extra):
    """The pip command that installs `extra` of keras_sentemb.

    Args:
        extra: str. A key of `EXTRAS`.

    Returns:
        str. The command, for the package installed from its repository.

    Examples:

    >>> install_hint("retrieval")
    'pip install -e ".[retrieval]"'
    """
    if extra not in EXTRAS:
        raise ValueError(f"Unknown extra {extra!r}; expected one of {sorted(EXTRAS)}.")
    return f'pip install -e ".[{extra}]"'


def missing_dependency(module, feature, extra):
    """The `MissingDependencyError` for `module`, needed by `feature`, from `extra`.

    Args:
        module: str. The module that cannot be imported (e.g. `"faiss"`).
        feature: str. What needs it, as the start of a sentence (e.g.
            `"Approximate search"`).
        extra: str. The extra of setup.py that installs it.

    Returns:
        A `MissingDependencyError` (to raise).

    Examples:

    >>> print(missing_dependency("faiss", "Approximate search", "retrieval"))
    Approximate search needs faiss, which is not installed: pip install -e ".[retrieval]" ...
    """
    hint = install_hint(extra)
    package = PACKAGES.get(module, module)
    return MissingDependencyError(
        f"{feature} needs {module}, which is not installed: {hint} in the keras_sentemb "
        f"repository (or pip install {package})"
    )


def is_missing(error, module):
    """Whether `error` says that `module` itself (not one of its imports) is missing.

    Args:
        error: ImportError. What the import raised.
        module: str. The top-level module that was imported.

    Returns:
        bool. True for a `ModuleNotFoundError` naming `module` or one of its
        submodules; an installed package that fails to import for another
        reason is not missing (its own error says what is wrong).
    """
    name = getattr(error, "name", None) or ""
    return isinstance(error, ModuleNotFoundError) and (
        name == module or name.startswith(module + "."))


def is_installed(module):
    """Whether top-level `module` can be imported, found without importing it.

    For a package that is slow to import and used in another process (mteb).
    A name that `sys.modules` maps to None counts as missing, as it does for
    `import`.

    Args:
        module: str. A top-level module name.

    Returns:
        bool.
    """
    if module in sys.modules:
        return sys.modules[module] is not None
    return importlib.util.find_spec(module) is not None


def import_optional(module, feature, extra):
    """Import `module`, or raise the one-line `MissingDependencyError`.

    Args:
        module: str. The module to import (e.g. `"pytrec_eval"`).
        feature: str. What needs it, as the start of a sentence.
        extra: str. The extra of setup.py that installs it.

    Returns:
        The imported module.

    Examples:

    ```python
    faiss = import_optional("faiss", "Approximate search", "retrieval")
    ```
    """
    try:
        return importlib.import_module(module)
    except ImportError as e:
        if not is_missing(e, module.split(".")[0]):
            raise
        raise missing_dependency(module.split(".")[0], feature, extra) from None

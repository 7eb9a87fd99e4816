"""A method's own options: one frozen, typed dataclass per method (light: no TensorFlow).

Each option is declared once, with `option(...)`: its type (the annotation),
its default (the paper's, with `source=` naming where the paper says it),
its validation (`choices=`, `minimum=`, `above=`, `maximum=`) and its
one-line doc. `MethodConfig.__post_init__` checks every field against its
type and bounds, so a config that exists is a valid one; the `fit_*`
signatures, their docstrings and the command line's `train METHOD` flags are
all read from the same fields.

Examples:

```python
@dataclasses.dataclass(frozen=True)
class MyConfig(MethodConfig):
    temperature: float = option(0.05, "Softmax temperature of the InfoNCE loss.",
                                above=0.0, source="Gao et al. 2021, section 3")
    mode: str = option("unsup", "What the data holds.", choices=("unsup", "sup"))

MyConfig(temperature=0.1)          # MyConfig(temperature=0.1, mode='unsup')
MyConfig(temperature=-1.0)         # ValueError: `temperature` must be > 0 ...
```
"""

import dataclasses
import numbers
import types
import typing

_NONE = type(None)


@dataclasses.dataclass(frozen=True)
class OptionSpec:
    """How one option is documented and validated (kept in the field's metadata).

    Attributes:
        doc: str. One line: what the option does (the type and the default
            are written from the annotation and the default).
        choices: tuple or None. The allowed values.
        minimum: number or None. Smallest allowed value (inclusive).
        above: number or None. Values must be greater than this.
        maximum: number or None. Largest allowed value (inclusive).
        source: str or None. Where the paper sets the default.
        python_only: bool. Takes a Python object (a callable): no flag on
            the command line.
        check: callable or None. `check(value)` raises `ValueError` for a
            value the other rules cannot describe.
    """

    doc: str
    choices: tuple = None
    minimum: float = None
    above: float = None
    maximum: float = None
    source: str = None
    python_only: bool = False
    check: typing.Callable = None


def option(default, doc, *, choices=None, minimum=None, above=None, maximum=None, source=None,
           python_only=False, check=None):
    """A dataclass field that is a method option (see the module docstring).

    Args:
        default: the default value (immutable: tuples, not lists).
        doc: str. One line.
        choices: tuple or None. The allowed values.
        minimum: number or None. Smallest allowed value (inclusive).
        above: number or None. Values must be greater than this.
        maximum: number or None. Largest allowed value (inclusive).
        source: str or None. Where the paper sets the default.
        python_only: bool. A Python object (no command-line flag).
        check: callable or None. `check(value)` raises `ValueError` for a
            value the other rules cannot describe.

    Returns:
        a `dataclasses.field`.
    """
    if isinstance(default, (list, dict, set)):
        raise TypeError(f"option defaults must be immutable; received {default!r}")
    spec = OptionSpec(doc=doc, choices=None if choices is None else tuple(choices),
                      minimum=minimum, above=above, maximum=maximum, source=source,
                      python_only=python_only, check=check)
    return dataclasses.field(default=default, metadata={"option": spec})


@dataclasses.dataclass(frozen=True)
class OptionField:
    """One option as the signature, docs and command line see it."""

    name: str
    type: object
    default: object
    spec: OptionSpec

    @property
    def optional(self):
        """`None` is allowed (the annotation is `X | None`)."""
        return _NONE in typing.get_args(self.type)

    @property
    def base_type(self):
        """The annotation without `None` (`float` for `float | None`)."""
        args = [a for a in typing.get_args(self.type) if a is not _NONE]
        if _is_union(self.type):
            return args[0] if len(args) == 1 else typing.Union[tuple(args)]
        return self.type

    def type_text(self):
        """The type as a docstring writes it: `float or None`, `tuple of int`."""
        text = _type_text(self.base_type)
        return f"{text} or None" if self.optional else text

    def doc_line(self):
        """`TYPE. Doc. Defaults to `X`.` (the `Args:` entry after the name)."""
        from keras_sentemb.pipelines.shared_arguments import format_default

        line = f"{self.type_text()}. {self.spec.doc}"
        if self.spec.choices is not None and "`" not in self.spec.doc:
            line += " One of " + ", ".join(format_default(c) for c in self.spec.choices) + "."
        line += f" Defaults to `{format_default(self.default)}`"
        line += f" ({self.spec.source})." if self.spec.source else "."
        return line


def _is_union(tp):
    return typing.get_origin(tp) in (typing.Union, types.UnionType)


def _type_text(tp):
    if tp is _NONE:
        return "None"
    origin = typing.get_origin(tp)
    if origin is tuple:
        args = typing.get_args(tp)
        if not args:
            return "tuple"
        item = _type_text(args[0])
        return f"tuple of ({item})" if " or " in item else f"tuple of {item}"
    if _is_union(tp):
        return " or ".join(_type_text(a) for a in typing.get_args(tp))
    return getattr(tp, "__name__", str(tp))


def _matches(value, tp):
    """Whether `value` is of type `tp` (bool is not a number here)."""
    if tp is typing.Any or tp is object:
        return True
    if _is_union(tp):
        return any(_matches(value, a) for a in typing.get_args(tp))
    if tp is _NONE:
        return value is None
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    if typing.get_origin(tp) is tuple:
        args = typing.get_args(tp)
        return isinstance(value, (tuple, list)) and all(_matches(v, args[0]) for v in value)
    if typing.get_origin(tp) is typing.Callable or tp is typing.Callable:
        return callable(value)
    return isinstance(value, tp)


def _normalized(value, tp):
    """`value` in the field's canonical form: float for float fields, tuples for tuples."""
    if value is None:
        return None
    if _is_union(tp):
        tp = next((a for a in typing.get_args(tp) if a is not _NONE and _matches(value, a)), tp)
    if tp is float:
        return float(value)
    if tp is int:
        return int(value)
    if typing.get_origin(tp) is tuple:
        return tuple(_normalized(v, typing.get_args(tp)[0]) for v in value)
    return value


def check_value(name, value, field_type, spec):
    """Raises `ValueError` unless `value` fits the option; returns it normalized."""
    if not _matches(value, field_type):
        raise ValueError(f"`{name}` must be {_describe(field_type)}. Received: {name}={value!r}.")
    value = _normalized(value, field_type)
    if value is None:
        return value
    if spec.choices is not None and value not in spec.choices:
        raise ValueError(f"`{name}` must be one of {', '.join(map(repr, spec.choices))}. "
                         f"Received: {name}={value!r}.")
    for bound, ok, word in ((spec.minimum, lambda v, b: v >= b, ">="),
                            (spec.above, lambda v, b: v > b, ">"),
                            (spec.maximum, lambda v, b: v <= b, "<=")):
        if bound is None:
            continue
        values = value if isinstance(value, tuple) else (value,)
        if not all(ok(v, bound) for v in values):
            raise ValueError(f"`{name}` must be {word} {bound}. Received: {name}={value!r}.")
    if spec.check is not None:
        spec.check(value)
    return value


def _describe(tp):
    if _is_union(tp):
        parts = [a for a in typing.get_args(tp) if a is not _NONE]
        text = " or ".join(_describe(a) for a in parts)
        return f"{text} or None" if _NONE in typing.get_args(tp) else text
    names = {bool: "a bool", int: "an int", float: "a number", str: "a string"}
    if tp in names:
        return names[tp]
    if typing.get_origin(tp) is tuple:
        return f"a {_type_text(tp)}"
    if tp is typing.Callable or typing.get_origin(tp) is typing.Callable:
        return "a callable"
    return _type_text(tp)


@dataclasses.dataclass(frozen=True)
class MethodConfig:
    """Base of every method's options dataclass: validates each field on creation.

    Subclasses are `@dataclasses.dataclass(frozen=True)` with fields made by
    `option(...)`. A config without options (a method that has none) is
    `MethodConfig()` itself.
    """

    def __post_init__(self):
        hints = typing.get_type_hints(type(self))
        for field in dataclasses.fields(self):
            spec = field.metadata.get("option")
            if spec is None:
                raise TypeError(f"{type(self).__name__}.{field.name} is not declared with option()")
            value = check_value(field.name, getattr(self, field.name), hints[field.name], spec)
            object.__setattr__(self, field.name, value)  # frozen: normalise once, here

    @classmethod
    def option_fields(cls):
        """The options in declaration order, as `OptionField`s."""
        hints = typing.get_type_hints(cls)
        return tuple(OptionField(f.name, hints[f.name], f.default, f.metadata["option"])
                     for f in dataclasses.fields(cls))

    def to_dict(self):
        """`name -> value` of every option."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

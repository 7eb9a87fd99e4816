"""A method's own options: one frozen, typed dataclass per method (light: no TensorFlow).

Each option is declared once, with `option(...)`: its type (the annotation),
its default (the paper's, with `source=` naming where the paper says it),
its validation (`choices=`, `minimum=`, `above=`, `maximum=`) and its
one-line doc, kept as an `Argument` (the class the shared run arguments use
too). `MethodConfig.__post_init__` checks every field with
`Argument.validate`, so a config that exists is a valid one; the `fit_*`
signatures, their docstrings, the command line's `train METHOD` flags and
help and the docs' option tables are all read from the same fields.

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
import typing

from keras_sentemb.pipelines.arguments import Argument


def option(default, doc, *, choices=None, minimum=None, above=None, maximum=None, source=None,
           python_only=False, check=None, trainer=True):
    """A dataclass field that is a method option (see the module docstring).

    Args:
        default: the default value (immutable: tuples, not lists).
        doc: str. One line: what the option does (the type and the default
            are written from the annotation and the default).
        choices: tuple or None. The allowed values.
        minimum: number or None. Smallest allowed value (inclusive).
        above: number or None. Values must be greater than this.
        maximum: number or None. Largest allowed value (inclusive).
        source: str or None. Where the paper sets the default.
        python_only: bool. A Python object (no command-line flag).
        check: callable or None. `check(value)` raises `ValueError` for a
            value the other rules cannot describe.
        trainer: bool. The trainer keeps the option (its `get_config` writes
            it, so a restored trainer has it). False for an option of the
            run only: data, paths, an optimizer (a `python_only` option never
            is kept).

    Returns:
        a `dataclasses.field` whose metadata holds the option's `Argument`
        (its name and type are the field's).
    """
    if isinstance(default, (list, dict, set)):
        raise TypeError(f"option defaults must be immutable; received {default!r}")
    argument = Argument(name="", type=object, default=default, doc=doc,
                        choices=None if choices is None else tuple(choices), minimum=minimum,
                        above=above, maximum=maximum, source=source, python_only=python_only,
                        check=check, trainer=trainer and not python_only)
    return dataclasses.field(default=default, metadata={"option": argument})


@dataclasses.dataclass(frozen=True)
class MethodConfig:
    """Base of every method's options dataclass: validates each field on creation.

    Subclasses are `@dataclasses.dataclass(frozen=True)` with fields made by
    `option(...)`. A config without options (a method that has none) is
    `MethodConfig()` itself.
    """

    def __post_init__(self):
        for argument in self.option_fields():
            value = argument.validate(getattr(self, argument.name))
            object.__setattr__(self, argument.name, value)  # frozen: normalise once, here

    @classmethod
    def option_fields(cls):
        """The options in declaration order, as `Argument`s (name, type and default set)."""
        hints = typing.get_type_hints(cls)
        out = []
        for field in dataclasses.fields(cls):
            argument = field.metadata.get("option")
            if argument is None:
                raise TypeError(f"{cls.__name__}.{field.name} is not declared with option()")
            out.append(dataclasses.replace(argument, name=field.name, type=hints[field.name],
                                           default=field.default))
        return tuple(out)

    def to_dict(self):
        """`name -> value` of every option."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def trainer_options(cls):
        """The names of the options a trainer keeps (`option(..., trainer=True)`)."""
        return tuple(a.name for a in cls.option_fields() if a.trainer)

    def trainer_dict(self):
        """`name -> value` of the options a trainer keeps: its `get_config`'s `"config"`."""
        return {name: getattr(self, name) for name in self.trainer_options()}

    @classmethod
    def resolve(cls, config=None, **options):
        """An instance from `config` (an instance, a dict of options or None) and `options`.

        `options` override `config`'s values; the result is validated as any
        instance is. A trainer calls this with what its constructor received.
        """
        if config is None:
            values = {}
        elif isinstance(config, cls):
            values = config.to_dict()
        elif isinstance(config, dict):
            values = dict(config)
        else:
            raise TypeError(f"`config` must be a {cls.__name__}, a dict of its options or None; "
                            f"received {type(config).__name__}")
        return cls(**{**values, **options})

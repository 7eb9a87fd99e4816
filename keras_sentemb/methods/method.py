"""`Method`: the base class of a training method (light: no TensorFlow).

A method is one class in one module: its options (a frozen `MethodConfig`
dataclass), the paper's defaults of the shared run arguments, the paper's
pooling for a raw backbone, and `train(run, data, config)`, which turns the
data into a trained encoder over the run's `FitScaffold`. `@register_method`
makes it reachable by name: `keras_sentemb.fit(name, data, ...)`,
`keras-sentemb train name`, `keras_sentemb.list_methods()`.

Examples:

```python
import dataclasses
import keras
from keras_sentemb.methods import Method, MethodConfig, option, register_method


@dataclasses.dataclass(frozen=True)
class MeanShiftConfig(MethodConfig):
    temperature: float = option(0.05, "Softmax temperature.", above=0.0)


@register_method("mean_shift")
class MeanShift(Method):
    \"\"\"One line: what the method does.\"\"\"

    config_class = MeanShiftConfig
    paper_pooling = "mean"
    in_batch = True
    run_defaults = {"batch_size": 64, "learning_rate": 3e-5, "steps": 200}

    def train(self, run, data, config):
        ...  # see docs/guides/adding-a-method.md
```
"""

import dataclasses
import inspect
import re
import textwrap

from keras_sentemb.methods.options import MethodConfig
from keras_sentemb.pipelines.arguments import OPTIONAL_ARGUMENTS
from keras_sentemb.pipelines.arguments import RUN_ARGUMENTS
from keras_sentemb.pipelines.arguments import SHARED_ARGUMENTS
from keras_sentemb.pipelines.arguments import SHARED_NAMES

_OPTIONAL = {a.name: a for a in OPTIONAL_ARGUMENTS}
# `Method.optional` of a method that supports them all (bfloat16, GradCache,
# gradient clipping, Matryoshka).
ALL_OPTIONAL = tuple(_OPTIONAL)
# The retrieval dev set (`dev_retrieval`, `dev_select`): every built-in method takes it.
DEV_RETRIEVAL = ("dev_retrieval", "dev_select")
# The share of a streamed source's rows that may be skipped: every built-in method takes it.
STREAMED = ("max_skipped",)
DATA_DOC = "list of str, a text file (one sentence a line), a `tf.data.Dataset` or a TFDS name."
# ... for a method that also streams its corpus.
STREAMED_DATA_DOC = DATA_DOC + (" Streams too: a glob of files, `keras_sentemb.streamed(...)` "
                                "or a `Mixture` (see the large-corpora guide).")


@dataclasses.dataclass(frozen=True)
class Preset:
    """A paper's settings of a method, named: `fit(name, preset=...)`, `--preset NAME`.

    Attributes:
        doc: str. One line: the paper's setup (what it trains, from which
            backbone).
        settings: dict. Argument name (a shared run argument or one of the
            method's options) -> `(value, source)`, the source saying where
            the paper (or its official code) sets it. Arguments given
            explicitly override them.

    Examples:

    ```python
    presets = {"unsup-bert-base": Preset("Unsupervised SimCSE-BERT-base.", {
        "model": ("bert_base_en_uncased", "run_unsup_example.sh: bert-base-uncased"),
        "batch_size": (64, "run_unsup_example.sh: --per_device_train_batch_size 64"),
    })}
    ```
    """

    doc: str
    settings: dict

    @property
    def values(self):
        """Argument name -> value."""
        return {name: value for name, (value, _) in self.settings.items()}

    @property
    def sources(self):
        """Argument name -> where the paper sets it."""
        return {name: source for name, (_, source) in self.settings.items()}


class UnknownPresetError(ValueError):
    """A method has no preset of that name; the message lists its presets (one line)."""


class Method:
    """Base class of a training method; subclass it and `@register_method("name")` it.

    Class attributes a method sets:

    - `config_class`: its options, a frozen `MethodConfig` dataclass
      (defaults to `MethodConfig`: no options).
    - `paper_pooling`: str. The paper's pooling for a raw backbone
      (`pooling="auto"` uses the model's own when it declares one).
    - `run_defaults`: dict. The paper's values of the shared run arguments
      (`batch_size`, `learning_rate`, `steps`, `max_length`, `eval_every`,
      `seed`, `dev`, ...) where they differ from the base defaults.
    - `optional`: tuple of str. The optional run arguments the method
      supports: `precision`, `mini_batch_size`, `max_grad_norm`,
      `matryoshka_dims`, `matryoshka_weights`, `dev_retrieval`, `dev_select`
      (`DEV_RETRIEVAL`: a retrieval dev set, scored during `run.fit`),
      `max_skipped` (`STREAMED`: the share of a streamed source's rows that
      may be skipped; a method without it keeps the default).
    - `in_batch`: bool. Its loss takes negatives from the batch (so a batch
      has at least 2 rows).
    - `custom_dev`: tuple of str. `dev` values the method handles itself.
    - `run_docs`: dict. Docs of shared arguments that read differently for
      this method.
    - `data_doc`: str. What `data` is.
    - `returns_doc`: str. What the `fit_*` function returns.
    - `parallel_passes`: bool. A training step runs two independent encoder
      passes (CT's towers, SimCSE's views): `keras-sentemb train` gives
      each its share of the cores.
    - `presets`: dict name -> `Preset`. The papers' settings, named
      (`fit(name, preset=...)`, `keras-sentemb train NAME --preset P`);
      explicit arguments override a preset's values.

    The class docstring's first line is the method's summary (the `train
    METHOD --help` description and the docs' method table); the rest of it
    is the `fit_*` docstring's prose.
    """

    name = None  # set by @register_method
    config_class = MethodConfig
    paper_pooling = "mean"
    run_defaults = {}
    optional = ()
    in_batch = False
    custom_dev = ()
    run_docs = {}
    data_doc = DATA_DOC
    returns_doc = "The trained `SentenceEncoder` (with a dev set: the kept checkpoint)."
    parallel_passes = False
    presets = {}

    def train(self, run, data, config):
        """Trains and returns the encoder (`run.finish(encoder)`).

        Args:
            run: `FitScaffold`. The validated shared arguments and the steps
                every method shares (loading, pooling, batches, `fit`,
                dev selection, saving).
            data: what the caller passed as `data`.
            config: an instance of `config_class`, already validated.
        """
        raise NotImplementedError(f"{type(self).__name__}.train")

    # ------------------------------------------------------------ definition
    @classmethod
    def check_definition(cls):
        """Raises `TypeError` when the class is not a usable method definition."""
        where = f"{cls.__module__}.{cls.__qualname__}"
        config = cls.config_class
        declared = isinstance(config, type) and (
            config is MethodConfig or "__dataclass_fields__" in vars(config))
        if not (declared and issubclass(config, MethodConfig)
                and config.__dataclass_params__.frozen):
            raise TypeError(f"{where}.config_class must be a frozen dataclass subclassing "
                            "MethodConfig")
        if cls.train is Method.train:
            raise TypeError(f"{where} must define train(self, run, data, config)")
        unknown = set(cls.optional) - set(_OPTIONAL)
        if unknown:
            raise TypeError(f"{where}.optional names unknown arguments {sorted(unknown)}; "
                            f"known: {sorted(_OPTIONAL)}")
        unknown = set(cls.run_defaults) - set(SHARED_NAMES) - set(cls.optional)
        if unknown:
            raise TypeError(f"{where}.run_defaults names {sorted(unknown)}, which are neither "
                            "shared arguments nor in `optional`")
        own = {f.name for f in config.option_fields()}
        clash = own & (set(RUN_ARGUMENTS) | {"data", "preset"})
        if clash:
            raise TypeError(f"{where}: options {sorted(clash)} clash with shared run arguments")
        config()  # the defaults must validate
        known = own | set(SHARED_NAMES) | set(cls.optional)
        for name, preset in cls.presets.items():
            if not isinstance(preset, Preset):
                raise TypeError(f"{where}.presets[{name!r}] must be a Preset")
            unknown = set(preset.values) - known
            if unknown:
                raise TypeError(f"{where}.presets[{name!r}] sets unknown arguments "
                                f"{sorted(unknown)}")
            config(**{k: v for k, v in preset.values.items() if k in own})
            for k, v in preset.values.items():
                if k in RUN_ARGUMENTS:
                    RUN_ARGUMENTS[k].validate(v)

    @classmethod
    def preset_values(cls, preset):
        """The values of the preset named `preset` (`{}` for None).

        Raises:
            UnknownPresetError: no such preset; the one-line message lists
                the method's presets.
        """
        if preset is None:
            return {}
        if preset not in cls.presets:
            known = ", ".join(cls.presets) or "none"
            raise UnknownPresetError(f"unknown preset {preset!r} for the {cls.name!r} method; "
                                     f"its presets: {known}")
        return dict(cls.presets[preset].values)

    @classmethod
    def summary(cls):
        """The first line of the class docstring."""
        return (inspect.getdoc(cls) or cls.__name__).splitlines()[0]

    @classmethod
    def run_arguments(cls):
        """`(shared, optional)`: the run's `Argument`s with this method's defaults and docs."""
        def argument(a):
            return dataclasses.replace(a, default=cls.run_defaults.get(a.name, a.default),
                                       doc=cls.run_docs.get(a.name, a.doc))
        shared = tuple(argument(a) for a in SHARED_ARGUMENTS)
        optional = tuple(argument(a) for a in OPTIONAL_ARGUMENTS if a.name in cls.optional)
        return shared, optional

    @classmethod
    def arguments(cls):
        """Every argument of the method in signature order: shared, own options, optional."""
        shared, optional = cls.run_arguments()
        return shared + cls.config_class.option_fields() + optional

    @classmethod
    def signature(cls):
        """`(data, <shared>, <own options>, <optional>, preset)`: the `fit_*` signature."""
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
        params = [inspect.Parameter("data", kind)]
        params += [inspect.Parameter(a.name, kind, default=a.default) for a in cls.arguments()]
        params.append(inspect.Parameter("preset", kind, default=None))
        return inspect.Signature(params)

    @classmethod
    def preset_doc(cls):
        """The `preset` argument's doc line: the method's presets, each with its one line."""
        if not cls.presets:
            return "str or None. The method has no presets. Defaults to `None`."
        names = "; ".join(f"`\"{name}\"`: {p.doc.rstrip('.')}" for name, p in cls.presets.items())
        return (f"str or None. A paper's settings, named ({names}); arguments given "
                "explicitly override them. Defaults to `None`.")

    @classmethod
    def docstring(cls):
        """The `fit_*` docstring: the class's prose, `Args:` for every argument, then
        the class's `Examples:` and `References:`."""
        doc = inspect.getdoc(cls) or cls.summary()
        sections = re.split(r"^(Examples:|References:)\n", doc, flags=re.M)
        prose, tails = sections[0].rstrip(), dict(zip(sections[1::2], sections[2::2]))
        entries = [("data", cls.data_doc)]
        entries += [(a.name, a.doc_line()) for a in cls.arguments()]
        entries.append(("preset", cls.preset_doc()))
        lines = ["Args:"]
        for name, text in entries:
            lines += textwrap.wrap(f"{name}: {text}", width=76, initial_indent="    ",
                                   subsequent_indent="        ", break_on_hyphens=False)
        returns = textwrap.fill(cls.returns_doc, width=76, initial_indent="    ",
                                subsequent_indent="    ", break_on_hyphens=False)
        parts = [prose, "\n".join(lines), f"Returns:\n{returns}"]
        parts += [f"{title}\n{tails[title].rstrip()}" for title in ("Examples:", "References:")
                  if title in tails]
        return "\n\n".join(parts)

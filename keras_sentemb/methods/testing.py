"""What a method's folder tells the tests that cover every method (light: no TensorFlow).

The tests that cover every method (a tiny training run that saves, reloads
and encodes the same vectors; the command line's flags; the presets; the
trainer's config round trip) read the methods from the registry, so a new
method is tested as soon as its folder exists. A method whose tiny run needs
more than the defaults says so in `testing.py` beside its `__init__.py`:

```python
from keras_sentemb.methods.testing import MethodTest

METHOD_TEST = MethodTest(data="pairs", options={"queue_size": 8},
                         make_trainer=lambda encoder: MyTrainer(encoder, temperature=0.1))
```

Nothing else lists the method; a folder without `testing.py` gets
`MethodTest()`.
"""

import dataclasses
import importlib
import typing

# The tiny training files the shared tests write (see `MethodTest.data`).
DATA_KINDS = ("corpus", "pairs", "triplets", "sts", "bitext", "multitask")


@dataclasses.dataclass(frozen=True)
class MethodTest:
    """How the shared tests train a tiny model with a method, and what more they check.

    Attributes:
        data: str or callable. The `--train-file` of the tiny run: one of
            `DATA_KINDS` (`"corpus"`: one sentence a line; `"pairs"`: a
            `sentence<TAB>positive` file; `"triplets"`: a
            `sent0,sent1,hard_neg` CSV; `"sts"`: STS-B-style scored pairs;
            `"bitext"`: `source<TAB>target` lines; `"multitask"`: the
            multitask folder), or `folder -> path` writing the method's own
            data into `folder` and returning its path.
        options: dict. The method's options for the tiny run (beyond `steps`,
            `batch_size`, `max_length`, `dev=None`), e.g. `{"negatives":
            "k3"}`; on the command line they are the `--kebab-case` flags.
        make_trainer: callable or None. `encoder -> trainer`: a trainer with
            options other than the defaults, for the config round trip; None
            builds the method's trainer with its defaults.
        postprocess: str or None. The class name of the post-processing
            layer the saved encoder carries (`"Whitening"`), if any.
        check: callable or None. `check(encoder, folder)`: more assertions on
            the tiny run's returned encoder and its output folder.
        reference: callable or None. `reference(encoder, folder, worker)`:
            the method against its reference implementation on identical
            inputs, `encoder` a tiny float32 model and `worker` the PyTorch
            side (`worker.call(path, function, **fields)` runs
            `function(request)` from the file `path` in a process of its own,
            with sentence-transformers and transformers, never TensorFlow).
            Skipped where PyTorch is not installed.
        every_family: bool. The method reaches past the encoder's forward
            pass into its backbone or tokenizer (the embedding layer, the
            hidden layers, the LM head, a copy of the weights, the
            vocabulary), so the keras-hub start tests train it from every
            family (BERT, RoBERTa, XLM-RoBERTa). A method that only calls the
            encoder trains from BERT there: the forward pass of each family
            is what the methods that set this exercise.
    """

    data: typing.Union[str, typing.Callable] = "corpus"
    options: dict = dataclasses.field(default_factory=dict)
    make_trainer: typing.Optional[typing.Callable] = None
    postprocess: typing.Optional[str] = None
    check: typing.Optional[typing.Callable] = None
    reference: typing.Optional[typing.Callable] = None
    every_family: bool = False

    def __post_init__(self):
        if isinstance(self.data, str) and self.data not in DATA_KINDS:
            raise ValueError(f"MethodTest.data must be one of {DATA_KINDS} or a callable; "
                             f"received {self.data!r}")

    def flags(self):
        """`options` as `train NAME` flags (`--name value`, `--flag` / `--no-flag`)."""
        out = []
        for name, value in self.options.items():
            flag = "--" + name.replace("_", "-")
            if isinstance(value, bool):
                out.append(flag if value else "--no-" + flag[2:])
            else:
                out += [flag, ",".join(map(str, value)) if isinstance(value, tuple) else str(value)]
        return out


def method_test(module):
    """The `MethodTest` of the method registered by `module` (its `testing.py`, else the default)."""
    try:
        testing = importlib.import_module(f"{module}.testing")
    except ModuleNotFoundError as error:
        if error.name != f"{module}.testing":
            raise
        return MethodTest()
    return testing.METHOD_TEST


def packed_rows(packed):
    """Each row's token ids without padding (tuples), from packed inputs' `token_ids` and
    `padding_mask`: what a method's pipeline check compares."""
    ids, mask = packed["token_ids"].numpy(), packed["padding_mask"].numpy()
    return [tuple(int(t) for t, m in zip(row, keep) if m) for row, keep in zip(ids, mask)]


class _Captured(Exception):
    """Raised instead of training: the batches a method's pipeline made."""

    def __init__(self, batches):
        super().__init__("captured")
        self.batches = batches


def first_batches(fit, data, **options):
    """The first two batches `fit(data, **options)` would train on, and its second from step 1.

    For a method's own checks of its data pipeline: `FitScaffold.fit` is
    replaced for the call, so nothing trains. Returns `(full, resumed)`:
    the batches of steps 0 and 1, and the batch a run resumed at step 1
    reads first.
    """
    from keras_sentemb.pipelines.scaffold import FitScaffold

    def capture(self, trainer, make_dataset, plan, **kwargs):
        raise _Captured([list(make_dataset(start).take(2 - start)) for start in (0, 1)])

    original = FitScaffold.fit
    FitScaffold.fit = capture
    try:
        fit(data, **options)
    except _Captured as captured:
        return captured.batches
    finally:
        FitScaffold.fit = original
    raise AssertionError(f"{fit.__name__} trained instead of reaching run.fit")

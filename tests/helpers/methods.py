"""The checks every registered method passes, read from the registry: `run_method_test`.

Nothing here names a method. Each method is found in the registry, and its
folder's `testing.py` (`keras_sentemb.methods.testing.MethodTest`) says what
its tiny run needs (the data, a few options, a trainer with other options, the
post-processing layer its saved encoder carries) and may add checks of its own.
"""

import importlib
import inspect

import numpy as np

from keras_sentemb.methods.registry import BUILTIN_METHODS
from keras_sentemb.methods.testing import method_test
from tests.helpers.corpora import MULTITASK_SENTENCES as WORDS
from tests.helpers.files import write_multitask_folder

# The shared run arguments of every tiny run (the method's test options add to them).
TINY_RUN = {"steps": 2, "batch_size": 8, "max_length": 16, "dev": None, "verbose": 0}
TINY_FLAGS = ["--steps", "2", "--batch-size", "8", "--max-length", "16", "--dev", "none",
              "--no-resume", "--verbose", "0"]
PROBES = ["a man plays the guitar .", "the cat sits on the mat .", "hello world"]


def tiny_sentences(n=64):
    return [f"{WORDS[i % 8]} and {WORDS[(i * 3) % 8]} {i} ." for i in range(n)]


def write_tiny_data(kind, folder):
    """The `--train-file` of a tiny run: `kind` from `DATA_KINDS`, or `folder -> path`."""
    if callable(kind):
        return kind(folder)
    sentences = tiny_sentences()
    shifted = sentences[1:] + sentences[:1]
    if kind == "multitask":
        return write_multitask_folder(folder / "multitask_data")
    names = {"corpus": "corpus.txt", "pairs": "pairs.tsv", "triplets": "triplets.csv",
             "sts": "sts.csv", "bitext": "bitext.tsv"}
    path = folder / names[kind]
    if kind == "corpus":
        text = "\n".join(sentences) + "\n"
    elif kind in ("pairs", "bitext"):
        text = "".join(f"{a}\t{b}\n" for a, b in zip(sentences, shifted))
    elif kind == "triplets":
        text = "sent0,sent1,hard_neg\n" + "".join(
            f"{a},{b},{c}\n" for a, b, c in zip(sentences, shifted, sentences[::-1]))
    else:  # STS-B's layout: genre, file, year, id, score, sentence1, sentence2
        text = "".join(f"main-captions\tMSRvid\t2012test\t{i:04d}\t{i % 6}.000\t{a}\t{b}\n"
                       for i, (a, b) in enumerate(zip(sentences, sentences[2:])))
    path.write_text(text, encoding="utf-8")
    return path


def method_trainers(name):
    """The `BaseTrainer` classes defined in the method's `trainer.py` (none without one)."""
    from keras_sentemb.trainers.base_trainer import BaseTrainer

    try:
        module = importlib.import_module(f"{BUILTIN_METHODS[name]}.trainer")
    except ModuleNotFoundError as error:
        if error.name != f"{BUILTIN_METHODS[name]}.trainer":
            raise
        return []
    return [cls for cls in vars(module).values()
            if isinstance(cls, type) and issubclass(cls, BaseTrainer)
            and cls.__module__ == module.__name__]


def make_method_trainer(name, encoder):
    """The method's trainer for the config round trip (its test's, else the defaults)."""
    spec = method_test(BUILTIN_METHODS[name])
    if spec.make_trainer is not None:
        return spec.make_trainer(encoder)
    trainers = method_trainers(name)
    return trainers[0](encoder) if trainers else None


def cosines(a, b):
    a = a / np.linalg.norm(a, axis=-1, keepdims=True)
    b = b / np.linalg.norm(b, axis=-1, keepdims=True)
    return np.sum(a * b, axis=-1)


def check_flags_parse_to_the_defaults(name):
    """`train NAME`'s own flags: none given parses to the method's defaults; each flag parses."""
    from keras_sentemb import cli
    from keras_sentemb.methods import get_method

    parser, method = cli.method_option_parser(name)
    assert method is get_method(name)
    parsed = vars(parser.parse_args([]))
    defaults = {a.name: a.default for a in method.arguments()}
    for key, value in parsed.items():
        if key in defaults and value is not None:
            expected = defaults[key]
            assert value == expected or str(value) == str(expected) or (
                isinstance(expected, tuple) and tuple(value) == expected), (name, key, value)
    flags = [a for a in parser._actions if a.option_strings and a.dest in defaults]
    own = {f.name for f in method.config_class.option_fields() if not f.python_only}
    assert own <= {a.dest for a in flags}, (name, own - {a.dest for a in flags})


def run_method_test(name, folder):
    """Trains a tiny model with `name`, saves it, reloads it and checks the same vectors.

    Also: the method's flags parse to its defaults, its presets resolve,
    and its folder's own `check(encoder, output)` passes. Returns the
    trained encoder.
    """
    import keras_sentemb
    from keras_sentemb.methods import get_method
    from keras_sentemb.methods.runner import split_options
    from keras_sentemb.models import SentenceEncoder
    from tests.conftest import make_tiny_encoder

    method = get_method(name)
    spec = method_test(BUILTIN_METHODS[name])
    check_flags_parse_to_the_defaults(name)
    for preset in method.presets:
        split_options(method, {}, preset)
    data = write_tiny_data(spec.data, folder)
    output = folder / f"{name}_model"
    encoder = keras_sentemb.fit(name, str(data), model=make_tiny_encoder(), output=str(output),
                                **TINY_RUN, **spec.options)
    kept = getattr(encoder, "encoder", encoder)  # a trainer-like result keeps its encoder
    assert kept.training_report.method == name
    reloaded = SentenceEncoder.from_preset(str(output))
    assert type(reloaded).__name__ == type(kept).__name__
    a, b = kept.encode(PROBES), reloaded.encode(PROBES)
    assert a.shape == b.shape and a.shape[0] == len(PROBES) and np.isfinite(a).all()
    assert cosines(a, b).min() > 0.999, (name, cosines(a, b))
    postprocess = getattr(reloaded, "postprocess", None)
    assert (None if postprocess is None else type(postprocess).__name__) == spec.postprocess
    if spec.check is not None:
        spec.check(kept, output)
    return kept


def trainer_arguments(trainer):
    """Every constructor argument of a trainer, its base classes' included."""
    from keras_sentemb.trainers.base_trainer import BaseTrainer

    return {p for cls in type(trainer).__mro__ if issubclass(cls, BaseTrainer)
            for p in inspect.signature(cls.__init__).parameters} - {"self", "kwargs"}

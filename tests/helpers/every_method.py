"""Every registered method on tiny data: the files each one trains on and options that keep it tiny."""

from tests.conftest import make_tiny_encoder
from tests.helpers.corpora import MULTITASK_SENTENCES as WORDS
from tests.helpers.files import write_multitask_folder

# method -> (its --train-file under the data folder, command-line options, the same as fit_* keywords)
RUNS = {
    "ct": ("corpus.txt", ["--negatives", "k3"], {"negatives": "k3"}),
    "simcse": ("corpus.txt", [], {}),
    "consert": ("corpus.txt", [], {}),
    "sg": ("corpus.txt", ["--projection-dim", "16"], {"projection_dim": 16}),
    "parallel": ("bitext.tsv", ["--eval-size", "10", "--dev-size", "10", "--queue-size", "8",
                                "--no-track-alignment"],
                 {"eval_size": 10, "dev_size": 10, "queue_size": 8, "track_alignment": False}),
    "multitask": ("multitask_data", ["--pretrain", "none"], {"pretrain": "none"}),
    "mlm": ("corpus.txt", [], {}),
    "whitening": ("corpus.txt", [], {}),
    "flow": ("corpus.txt", [], {}),
    "sts": ("sts.csv", [], {}),
    "static": ("corpus.txt", ["--dims", "8"], {"dims": 8}),
}

PROBE = ["a man plays the guitar .", "the cat sits on the mat ."]


def write_every_method_data(root):
    """The tiny model (`root/tiny`) and every file of `RUNS` under `root`."""
    make_tiny_encoder().save(root / "tiny")
    sentences = [f"{WORDS[i % 8]} and {WORDS[(i * 3) % 8]} {i} ." for i in range(64)]
    (root / "corpus.txt").write_text("\n".join(sentences) + "\n", encoding="utf-8")
    (root / "bitext.tsv").write_text(
        "".join(f"{a}\t{b}\n" for a, b in zip(sentences, sentences[1:] + sentences[:1])),
        encoding="utf-8")
    (root / "sts.csv").write_text("".join(
        f"main-captions\tMSRvid\t2012test\t{i:04d}\t{i % 6}.000\t{a}\t{b}\n"
        for i, (a, b) in enumerate(zip(sentences, sentences[2:]))), encoding="utf-8")
    write_multitask_folder(root / "multitask_data")
    return root


def fit_tiny(method, root, **extra):
    """`keras_sentemb.fit(method, ...)` on the tiny model and data under `root`, 2 steps, seed 0."""
    import keras_sentemb

    data, _, options = RUNS[method]
    return keras_sentemb.fit(method, str(root / data), model=str(root / "tiny"), steps=2,
                             batch_size=8, max_length=16, dev=None, verbose=0, seed=0,
                             **options, **extra)

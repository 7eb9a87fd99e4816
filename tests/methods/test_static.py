"""The `static` method: registered, trains every objective, and beats plain distillation."""

import numpy as np
import pytest

import keras_sentemb
from keras_sentemb.models.static_encoder import StaticEncoder
from tests.conftest import TINY_VOCAB
from tests.conftest import make_tiny_encoder

WORDS = [w for w in TINY_VOCAB if w.isalpha() and w.isascii()]
SENTENCES = [" ".join(WORDS[(i * k) % len(WORDS)] for k in range(1, 6)) for i in range(96)]


def test_the_method_is_listed_and_has_a_fit_function():
    assert "static" in keras_sentemb.list_methods()
    assert "objective" in keras_sentemb.fit_static.__doc__


@pytest.mark.parametrize("objective", ["distill", "contrastive", "pairs"])
def test_every_objective_trains_the_table_only(tmp_path, objective):
    teacher = make_tiny_encoder(pooling="mean", normalize=True)
    before = [w.copy() for w in teacher.get_weights()]
    data = list(zip(SENTENCES, SENTENCES[1:])) if objective == "pairs" else SENTENCES
    static = keras_sentemb.fit_static(data, model=teacher, steps=6, batch_size=16, dims=8,
                                      objective=objective, dev=None, verbose=0,
                                      output=str(tmp_path / "static"), matryoshka_dims=(8, 4))
    assert isinstance(static, StaticEncoder) and static.output_dim == 8
    assert static.training_report.steps_trained == 6
    for a, b in zip(before, teacher.get_weights()):
        np.testing.assert_array_equal(a, b)
    loaded = StaticEncoder.from_preset(tmp_path / "static")
    np.testing.assert_allclose(loaded.encode(SENTENCES[:4]), static.encode(SENTENCES[:4]),
                               atol=1e-6)


def test_bad_options_fail_before_anything_loads():
    with pytest.raises(ValueError, match="objective"):
        keras_sentemb.fit_static(SENTENCES, objective="mse")
    with pytest.raises(ValueError, match="table_dtype"):
        keras_sentemb.fit_static(SENTENCES, table_dtype="int4")


@pytest.mark.integration
def test_training_beats_the_distilled_encoder_on_sts_b_dev():
    from keras_sentemb.data.resources import bundled_corpus
    from keras_sentemb.evaluation.sts import evaluate_sts
    from keras_sentemb.data.resources import bundled_sts_dir

    teacher = keras_sentemb.SentenceEncoder.from_preset("default")
    distilled = keras_sentemb.distill_static(teacher, dims=256)
    sentences = bundled_corpus().read_text(encoding="utf-8").splitlines()[:4000]
    trained = keras_sentemb.fit_static(sentences, model=teacher, steps=120, dims=256, dev=None,
                                       verbose=0)

    def dev(encoder):
        return evaluate_sts(encoder, bundled_sts_dir(), tasks=["STSBenchmark"],
                            split="dev")["STSBenchmark"]["dev"]["spearman"]

    assert dev(trained) > dev(distilled) + 1.0


def test_train_static_on_the_command_line_saves_a_folder_that_loads(tmp_path):
    from keras_sentemb import cli

    make_tiny_encoder(pooling="mean", normalize=True).save(tmp_path / "tiny")
    (tmp_path / "corpus.txt").write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    code = cli.main(["train", "static", "--model", str(tmp_path / "tiny"), "--train-file",
                     str(tmp_path / "corpus.txt"), "--output", str(tmp_path / "out"),
                     "--steps", "4", "--batch-size", "8", "--dims", "8", "--eval-every", "2",
                     "--verbose", "0"])
    assert code == 0
    loaded = keras_sentemb.SentenceEncoder.from_preset(str(tmp_path / "out"))
    assert isinstance(loaded, StaticEncoder) and loaded.encode(SENTENCES[:2]).shape == (2, 8)

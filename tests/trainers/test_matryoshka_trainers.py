"""matryoshka_dims on every trainer whose loss compares vectors: wiring, refusals, fit_*."""

import numpy as np
import pytest
import tensorflow as tf

import keras_sentemb
from keras_sentemb.losses.matryoshka import truncate_nest
from keras_sentemb.methods.consert.trainer import ConSERT
from keras_sentemb.methods.contrastive_tension.trainer import ContrastiveTension
from keras_sentemb.methods.multitask.trainer import MultitaskModel
from keras_sentemb.methods.parallel.trainer import ParallelContrastive
from keras_sentemb.methods.simcse.trainer import SimCSE
from tests.conftest import make_tiny_encoder
from tests.helpers.batches import packed
from tests.helpers.corpora import SENTENCES, TRIPLETS

DIMS, WEIGHTS = (32, 16, 4), (1.0, 0.5, 2.0)


def _loss(out):
    return float(out.loss)


def _check(trainer, data):
    """With Matryoshka, the loss is the weighted sum of the method's loss on prefixes."""
    embeddings = trainer.embed_batch(data, training=False)
    expected = sum(
        w * _loss(trainer.loss_from_embeddings(truncate_nest(embeddings, d, 32), data, False))
        for d, w in zip(DIMS, WEIGHTS))
    plain = _loss(trainer.compute_loss_terms(data, training=False))
    trainer.set_matryoshka(DIMS, WEIGHTS)
    got = _loss(trainer.compute_loss_terms(data, training=False))
    assert got == pytest.approx(expected, rel=1e-5)
    assert got != pytest.approx(plain * sum(WEIGHTS), rel=1e-3)
    trainer.set_matryoshka(None)
    assert _loss(trainer.compute_loss_terms(data, training=False)) == pytest.approx(plain)


def test_simcse_unsup_and_sup():
    encoder = make_tiny_encoder()
    _check(SimCSE(encoder, pooling="mean", mlp="none"), {"sentence": packed(encoder)})
    columns = ("sent0", "sent1", "hard_neg")
    data = {k: encoder.preprocess(tf.constant([t[i] for t in TRIPLETS]), 16)
            for i, k in enumerate(columns)}
    _check(SimCSE(encoder, mode="sup", pooling="mean", mlp="none", hard_negative_weight=0.5), data)


def test_ct_in_batch():
    encoder = make_tiny_encoder()
    trainer = ContrastiveTension(encoder, negatives="in_batch")
    x = packed(encoder)
    _check(trainer, {"left": x, "right": x})


def test_consert_unsup():
    encoder = make_tiny_encoder()
    _check(ConSERT(encoder, views=("shuffle", "feature_cutoff")),
           {"sentence": packed(encoder)})


def test_parallel_with_a_queue_cut_to_the_prefix():
    teacher = make_tiny_encoder(num_layers=1)
    trainer = ParallelContrastive(teacher.clone(name="student"), teacher, mlp="none",
                                  queue_size=8)
    trainer.queue.enqueue(tf.math.l2_normalize(tf.random.normal((5, 32)), -1))
    data = {"source": teacher.preprocess(tf.constant(SENTENCES)),
            "target": teacher.preprocess(tf.constant(SENTENCES[::-1]))}
    _check(trainer, data)
    # The keys handed on for the queue keep their full width.
    trainer.set_matryoshka(DIMS, WEIGHTS)
    assert trainer.compute_loss_terms(data, training=False).aux.shape[-1] == 32


def test_multitask_fusion_loss():
    encoder = make_tiny_encoder(num_layers=1)
    model = MultitaskModel(encoder, hidden_dim=8, dropout=0.0, pooling="mean", fusion=True)
    batch = {"sentence1": packed(encoder, SENTENCES[:4]), "sentence2": packed(encoder, SENTENCES[4:]),
             "mask": tf.constant([1.0, 1.0, 1.0, 0.0])}
    data = {"similarity": batch}
    plain = float(model.fusion_loss(data, training=False))
    z = encoder.sentence_vectors(
        {k: tf.concat([batch["sentence1"][k], batch["sentence2"][k]], 0)
         for k in batch["sentence1"]}, "mean", training=False)
    model.set_matryoshka(DIMS, WEIGHTS)
    got = float(model.fusion_loss(data, training=False))
    from keras_sentemb.losses import info_nce_loss

    # The fusion loss pairs each sentence with itself (two dropout views: here, no dropout).
    mask = np.concatenate([batch["mask"].numpy()] * 2)
    expected = sum(
        w * float(np.sum(info_nce_loss(z[:, :d], z[:, :d], temperature=model.fusion_temperature,
                                       reduction="none").numpy() * mask) / mask.sum())
        for d, w in zip(DIMS, WEIGHTS))
    assert got == pytest.approx(expected, rel=1e-5) and got != pytest.approx(plain, rel=1e-3)


def test_refusals():
    encoder = make_tiny_encoder()
    with pytest.raises(ValueError, match="mlp='none'"):
        SimCSE(encoder, pooling="cls", mlp="train").set_matryoshka((16,))
    with pytest.raises(ValueError, match="use mode='unsup'"):
        ConSERT(encoder, mode="sup", num_labels=3).set_matryoshka((16,))
    with pytest.raises(ValueError, match="fusion=True"):
        MultitaskModel(make_tiny_encoder(num_layers=1), hidden_dim=8).set_matryoshka((16,))
    with pytest.raises(ValueError, match=r"ints in \[1, 32\]"):
        SimCSE(encoder, pooling="mean", mlp="none").set_matryoshka((64,))


def test_fit_simcse_and_ct_train_with_matryoshka(tmp_path):
    from tests.helpers.corpora import CORPUS

    model = keras_sentemb.fit_simcse(
        CORPUS[:64], model=make_tiny_encoder(pooling="mean"), steps=3, batch_size=8, dev=None,
        verbose=0, matryoshka_dims=(32, 8), matryoshka_weights=(1.0, 1.0),
        output=str(tmp_path / "m"))
    assert model.training_report.hyperparameters["matryoshka_dims"] == [32, 8]
    assert model.encode(["hello world"], truncate_dim=8).shape == (1, 8)
    keras_sentemb.fit_ct(CORPUS[:64], model=make_tiny_encoder(), steps=2, batch_size=8, dev=None,
                         negatives="in_batch", verbose=0, matryoshka_dims="32,16")
    with pytest.raises(ValueError, match="needs `matryoshka_dims`"):
        keras_sentemb.fit_simcse(CORPUS[:16], model=make_tiny_encoder(), steps=1, dev=None,
                                 matryoshka_weights=(1.0,))


def test_train_command_takes_matryoshka_dims(tmp_path, capsys):
    import json

    from keras_sentemb import cli
    from tests.helpers.corpora import CORPUS

    make_tiny_encoder(pooling="mean").save(tmp_path / "tiny")
    (tmp_path / "train.txt").write_text("\n".join(CORPUS[:32]) + "\n")
    assert cli.main(["train", "simcse", "--model", str(tmp_path / "tiny"), "--train-file",
                     str(tmp_path / "train.txt"), "--output", str(tmp_path / "out"), "--steps", "2",
                     "--batch-size", "8", "--dev", "none", "--matryoshka-dims", "32,8",
                     "--verbose", "0"]) == 0
    report = json.loads((tmp_path / "out" / "training_report.json").read_text())
    assert report["hyperparameters"]["matryoshka_dims"] == [32, 8]  # parsed by its type
    assert cli.main(["train", "simcse", "--model", str(tmp_path / "tiny"), "--train-file",
                     str(tmp_path / "train.txt"), "--output", str(tmp_path / "bad"), "--steps", "1",
                     "--dev", "none", "--matryoshka-dims", "64"]) == 2
    assert "ints in [1, 32]" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["simcse_sup", "ct_in_batch", "consert"])
def test_grad_cache_with_matryoshka_equals_one_tape(kind):
    from tests.helpers.training import make_grad_cache_trainer
    from tests.trainers.grad_cache_reference import largest_gradient
    from tests.trainers.grad_cache_reference import max_gradient_difference
    from tests.trainers.grad_cache_reference import reference_loss_and_gradients

    trainer, data = make_grad_cache_trainer(kind, 3)
    trainer.set_matryoshka((32, 8), (1.0, 0.5))
    ref_loss, ref_grads = reference_loss_and_gradients(trainer, data, 3)
    trainer._reseed()
    out, grads = trainer.grad_cache_gradients(data)
    assert float(out.loss) == pytest.approx(float(ref_loss), rel=1e-5)
    assert max_gradient_difference(grads, ref_grads) <= 1e-5 * max(1.0, largest_gradient(ref_grads))

"""Masked-language-model training: BERT's masking, the tied head, fit_mlm."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_sentemb
from keras_sentemb.models import SentenceEncoder
from keras_sentemb.methods.masked_language_model.trainer import MaskedLanguageModel
from keras_sentemb.methods.masked_language_model.trainer import mask_tokens
from tests.conftest import make_tiny_encoder
from tests.helpers.corpora import CORPUS
from tests.numeric import assert_close_vectors


def _packed(encoder, sentences=CORPUS[:32]):
    return encoder.preprocess(tf.constant(sentences), 16)


def test_masking_follows_berts_rule_and_is_a_function_of_the_seed():
    encoder = make_tiny_encoder()
    inputs = _packed(encoder, CORPUS * 4)
    specials = [2, 3, 0]  # [CLS], [SEP], [PAD]
    masked, positions, ids, weights = mask_tokens(inputs, [1, 7], 0.15, 4, 42, specials)
    token_ids, real = inputs["token_ids"].numpy(), inputs["padding_mask"].numpy().astype(bool)
    candidate = real & ~np.isin(token_ids, specials)
    selected = np.zeros_like(candidate)
    for row, (pos, w) in enumerate(zip(positions.numpy(), weights.numpy())):
        selected[row, pos[w > 0]] = True
    assert not (selected & ~candidate).any()  # never a special or padding token
    assert abs(selected.sum() / candidate.sum() - 0.15) < 0.03
    np.testing.assert_array_equal(ids.numpy()[weights.numpy() > 0], token_ids[selected])
    new = masked["token_ids"].numpy()
    np.testing.assert_array_equal(new[~selected], token_ids[~selected])  # others untouched
    share_mask = np.mean(new[selected] == 4)
    share_kept = np.mean(new[selected] == token_ids[selected])
    assert abs(share_mask - 0.8) < 0.06 and 0.05 < share_kept < 0.2
    again = mask_tokens(inputs, [1, 7], 0.15, 4, 42, specials)
    np.testing.assert_array_equal(again[0]["token_ids"].numpy(), new)
    other = mask_tokens(inputs, [1, 8], 0.15, 4, 42, specials)
    assert not np.array_equal(other[0]["token_ids"].numpy(), new)


def test_head_is_tied_to_the_token_embedding_and_loss_goes_down():
    encoder = make_tiny_encoder()
    trainer = MaskedLanguageModel(encoder, seed=3)
    embeddings = encoder.adapter.token_embedding.embeddings
    assert any(v is embeddings for v in trainer.head.weights)  # tied: the same variable
    paths = [v.path for v in trainer.trainable_variables]
    assert len(paths) == len(set(id(v) for v in trainer.trainable_variables))
    trainer.compile(optimizer=keras.optimizers.Adam(3e-3))
    batch = {"sentence": _packed(encoder)}
    ds = tf.data.Dataset.from_tensors(batch).repeat()
    before = float(trainer.compute_loss_terms(batch, training=False).loss)
    assert before == pytest.approx(np.log(encoder.backbone.vocabulary_size), rel=0.3)
    trainer.fit(ds, steps_per_epoch=25, epochs=1, verbose=0)
    after = float(trainer.compute_loss_terms(batch, training=False).loss)
    assert after < 0.85 * before


def test_fit_mlm_saves_the_encoder_without_the_head(tmp_path):
    encoder = make_tiny_encoder()
    kept = keras_sentemb.fit_mlm(CORPUS, model=encoder, steps=3, batch_size=8, max_length=16,
                                 eval_every=3, output=str(tmp_path / "mlm"), verbose=0)
    report = kept.training_report
    assert report.steps_trained == 3 and report.selection is None  # no dev by default
    loaded = SentenceEncoder.from_preset(str(tmp_path / "mlm"))
    assert len(loaded.weights) == len(make_tiny_encoder().weights)
    assert_close_vectors(loaded.encode(CORPUS[:3]), kept.encode(CORPUS[:3]), rtol=1e-5)

"""Prompt templates (`SentenceEncoder(prompt=...)`) and the token poolings they use."""

import json

import numpy as np
import pytest
import tensorflow as tf

from keras_sentemb.models import SentenceEncoder
from keras_sentemb.models.pooling import parse_pooling
from keras_sentemb.models.pooling import pool_hidden_states
from tests.conftest import make_tiny_encoder

TEMPLATE = "the [X] is [MASK] ."
SENTENCES = ["a man plays the guitar .", "hello world", "the cat sits on the mat ."]

RNG = np.random.default_rng(0)
STATES = [RNG.normal(size=(3, 5, 4)).astype("float32") for _ in range(2)]
MASK = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], "int32")


@pytest.mark.parametrize("index", [0, 1, -1, -2])
def test_token_pooling_reads_one_token_from_the_start_or_each_rows_end(index):
    got = np.asarray(pool_hidden_states(STATES, MASK, parse_pooling(f"token:{index}")))
    rows = [i if i >= 0 else MASK[r].sum() + i for r, i in enumerate([index] * 3)]
    np.testing.assert_array_equal(got, np.stack([STATES[-1][r, i] for r, i in enumerate(rows)]))
    assert parse_pooling(" Token:-1 ") == "token:-1" and parse_pooling("MASK") == "mask"


def test_mask_pooling_needs_the_encoders_prompt():
    with pytest.raises(ValueError, match="through the encoder"):
        pool_hidden_states(STATES, MASK, "mask")
    with pytest.raises(ValueError, match="no prompt with \\[MASK\\]"):
        make_tiny_encoder(pooling="mask")
    with pytest.raises(ValueError, match="no prompt with \\[MASK\\]"):
        make_tiny_encoder(prompt="the [X] is", pooling="mask")


def test_the_mask_vector_is_the_last_layer_at_mask():
    encoder = make_tiny_encoder(prompt=TEMPLATE, pooling="mask")
    vectors = encoder.encode(SENTENCES, precision="float32")
    for text, vector in zip(SENTENCES, vectors):
        body = [int(t) for t in encoder.tokenize([text])[0].numpy()]
        ids = [encoder.start_token_id, *encoder.prompt.prefix, *body, *encoder.prompt.suffix,
               encoder.end_token_id]
        last = encoder.hidden_states({"token_ids": tf.constant([ids]),
                                      "padding_mask": tf.ones([1, len(ids)], tf.int32)})[-1]
        want = last[0, ids.index(encoder.tokenizer.mask_token_id)].numpy()
        assert want @ vector / np.linalg.norm(want) / np.linalg.norm(vector) > 1 - 1e-5


def test_assigning_a_prompt_changes_what_encode_frames():
    encoder = make_tiny_encoder()
    plain = encoder.encode(SENTENCES, precision="float32")
    encoder.prompt = TEMPLATE
    framed = encoder.encode(SENTENCES, precision="float32")
    assert not np.allclose(plain, framed)
    encoder.prompt = None
    np.testing.assert_allclose(encoder.encode(SENTENCES, precision="float32"), plain, rtol=1e-5,
                               atol=1e-6)
    with pytest.raises(ValueError, match="exactly once"):
        encoder.prompt = "no slot here"
    with pytest.raises(ValueError, match="at most 1,000"):
        encoder.prompt = "[X]" + "word " * 300


def test_a_saved_prompt_reloads_and_older_versions_are_told_the_format(tmp_path):
    encoder = make_tiny_encoder(prompt=TEMPLATE, pooling="mask")
    encoder.save(tmp_path / "prompted")
    stored = json.loads((tmp_path / "prompted" / "sentemb_config.json").read_text())
    assert stored["prompt"] == TEMPLATE and stored["format_version"] == 3
    again = SentenceEncoder.from_preset(str(tmp_path / "prompted"))
    assert again.prompt == encoder.prompt and again.pooling == "mask"
    np.testing.assert_allclose(again.encode(SENTENCES, precision="float32"),
                               encoder.encode(SENTENCES, precision="float32"),
                               rtol=1e-5, atol=1e-6)
    make_tiny_encoder().save(tmp_path / "plain")
    plain = json.loads((tmp_path / "plain" / "sentemb_config.json").read_text())
    assert "prompt" not in plain and plain["format_version"] == 1
    stored["prompt"] = "[X]" + "x" * 5000  # a hostile folder: refused before anything runs
    (tmp_path / "prompted" / "sentemb_config.json").write_text(json.dumps(stored))
    with pytest.raises(ValueError, match="at most 1,000") as error:
        SentenceEncoder.from_preset(str(tmp_path / "prompted"))
    assert "\n" not in str(error.value)


def test_a_restored_config_tokenizes_its_prompt_on_first_use():
    # A Keras archive builds the encoder from its config before the tokenizer's vocabulary loads.
    encoder = make_tiny_encoder(prompt=TEMPLATE, pooling="mask")
    restored = SentenceEncoder.from_config(encoder.get_config())
    assert restored.prompt_template == TEMPLATE
    restored.tokenizer = encoder.tokenizer
    assert restored.prompt == encoder.prompt


def test_clones_twins_and_a_projection_head_keep_the_prompt():
    from keras_sentemb.models.projection_head import with_projection_head

    encoder = make_tiny_encoder(prompt=TEMPLATE, pooling="mask")
    assert encoder.clone().prompt == encoder.prompt
    assert encoder.precision_twin("bfloat16").prompt == encoder.prompt
    assert with_projection_head(encoder).prompt == encoder.prompt

"""Embedding rows gathered from the stored table, then cast (`kernels/embedding_gather.py`)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_sentemb.kernels.embedding_gather import install_embedding_gather
from tests.conftest import make_tiny_encoder
from tests.helpers.models import make_tiny_roberta

SENTS = ["a man is playing the guitar", "the dog runs in the park", "a"]


def table_casts(fn, *args, table_shape):
    """Cast ops in `fn`'s graph whose input has the shape of an embedding table."""
    graph = tf.function(fn, autograph=False).get_concrete_function(*args).graph
    return [op.name for op in graph.get_operations()
            if op.type == "Cast" and op.inputs[0].shape == table_shape]


def unpatched(layer):
    layer.__dict__.pop("call", None)


def test_keras_casts_the_whole_table_and_the_patch_does_not():
    layer = keras.layers.Embedding(50, 8, dtype="mixed_bfloat16")
    ids = tf.constant([[1, 2, 3]])
    layer(ids)
    assert not layer.autocast  # Keras means to gather first ...
    assert table_casts(layer, ids, table_shape=(50, 8))  # ... but casts the table
    assert install_embedding_gather(layer) == 1
    assert table_casts(layer, ids, table_shape=(50, 8)) == []
    assert layer(ids).dtype == "bfloat16"


@pytest.mark.parametrize("make", [make_tiny_encoder, make_tiny_roberta], ids=["bert", "roberta"])
def test_a_mixed_precision_training_step_casts_rows_not_tables(make):
    encoder = make().clone(dtype="mixed_bfloat16")
    x = encoder.preprocess(tf.constant(SENTS))
    table = encoder.adapter.token_embedding.embeddings
    variables = encoder.trainable_variables

    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(encoder(x, training=True))
        return tape.gradient(loss, variables)

    assert table_casts(step, x, table_shape=table.shape) == []
    grads = step(x)
    grad = grads[[i for i, v in enumerate(variables) if v is table][0]]
    assert isinstance(grad, tf.IndexedSlices) and grad.values.dtype == tf.float32


@pytest.mark.parametrize("make", [make_tiny_encoder, make_tiny_roberta], ids=["bert", "roberta"])
def test_vectors_and_gradients_are_keras_own(make):
    encoder = make().clone(dtype="mixed_bfloat16")
    x = encoder.preprocess(tf.constant(SENTS))
    variables = encoder.trainable_variables
    embeddings = [layer for layer in encoder.backbone._flatten_layers()
                  if isinstance(layer, keras.layers.Embedding) and "call" in layer.__dict__]
    assert embeddings  # the token (and segment) embeddings

    def run():
        with tf.GradientTape() as tape:
            y = encoder(x, training=False)
            loss = tf.reduce_sum(tf.square(y))
        grads = tape.gradient(loss, variables)
        return y.numpy(), [tf.convert_to_tensor(g).numpy() for g in grads]

    patched_y, patched_grads = run()
    for layer in embeddings:
        unpatched(layer)
    keras_y, keras_grads = run()
    np.testing.assert_array_equal(patched_y, keras_y)
    for a, b in zip(patched_grads, keras_grads):
        np.testing.assert_array_equal(a, b)


def test_installed_once_on_every_non_autocast_embedding():
    encoder = make_tiny_encoder()
    names = sorted(layer.name for layer in encoder.backbone._flatten_layers()
                   if isinstance(layer, keras.layers.Embedding) and "call" in layer.__dict__)
    assert names == ["segment_embedding", "token_embedding"]  # position: keras-hub's own layer
    assert install_embedding_gather(encoder.backbone) == 0  # idempotent
    assert install_embedding_gather(encoder.clone(dtype="mixed_bfloat16").backbone) == 0


def test_a_reversed_tied_embedding_keeps_the_compute_dtype_table():
    layer = keras.layers.ReversibleEmbedding(50, 8, tie_weights=True, dtype="mixed_bfloat16")
    layer(tf.constant([[1, 2]]))
    install_embedding_gather(layer)
    hidden = tf.random.normal([2, 8], dtype=tf.bfloat16)
    logits = layer(hidden, reverse=True)
    unpatched(layer)
    np.testing.assert_array_equal(logits.numpy(), layer(hidden, reverse=True).numpy())
    assert logits.dtype == "bfloat16"

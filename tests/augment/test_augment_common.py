"""Properties shared by every view layer: inference identity, graph mode with
dynamic shapes, reduced precision, serialization, argument validation and
seeded reproducibility."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_sentemb.augment import AdversarialPerturbation
from keras_sentemb.augment import EmbeddingDropout
from keras_sentemb.augment import FeatureCutoff
from keras_sentemb.augment import IdentityView
from keras_sentemb.augment import SpanCutoff
from keras_sentemb.augment import TokenCutoff
from keras_sentemb.augment import TokenShuffle

# name -> factory taking extra kwargs
RANDOM_LAYERS = {
    "token_shuffle": lambda **kw: TokenShuffle(**kw),
    "token_shuffle_keep_special": lambda **kw: TokenShuffle(keep_special=True, **kw),
    "token_cutoff": lambda **kw: TokenCutoff(rate=0.3, **kw),
    "feature_cutoff": lambda **kw: FeatureCutoff(rate=0.25, **kw),
    "span_cutoff_keep": lambda **kw: SpanCutoff(rate=0.3, mode="keep", **kw),
    "span_cutoff_cut": lambda **kw: SpanCutoff(rate=0.3, mode="cut", **kw),
    "dropout": lambda **kw: EmbeddingDropout(rate=0.2, **kw),
    "dropout_exact": lambda **kw: EmbeddingDropout(rate=0.2, mode="exact", **kw),
}
ALL_LAYERS = {
    **RANDOM_LAYERS,
    "identity": lambda **kw: IdentityView(),
    "adversarial": lambda **kw: AdversarialPerturbation(noise_norm=0.01),
}
RATE_LAYERS = [TokenCutoff, FeatureCutoff, SpanCutoff, EmbeddingDropout]
ALL_CLASSES = RATE_LAYERS + [TokenShuffle, IdentityView, AdversarialPerturbation]


def _run(layer, embeddings, mask, training):
    """Calls `layer` with its stage's inputs; returns a tuple of outputs."""
    if layer.stage == "positions":
        position_ids = tf.tile(
            tf.range(tf.shape(mask)[1], dtype=tf.int32)[None, :],
            [tf.shape(mask)[0], 1],
        )
        return (layer(position_ids, padding_mask=mask, training=training),)
    if layer.requires_gradients:
        gradients = tf.ones_like(embeddings)
        return (layer(embeddings, gradients, padding_mask=mask, training=training),)
    outputs = layer(embeddings, padding_mask=mask, training=training)
    return tuple(outputs) if layer.updates_mask else (outputs,)


def _inputs_of(layer, embeddings, mask):
    if layer.stage == "positions":
        batch_size, seq_len = np.shape(mask)
        return (np.tile(np.arange(seq_len, dtype="int32"), (batch_size, 1)),)
    if layer.updates_mask:
        return (embeddings, mask)
    return (embeddings,)


@pytest.mark.parametrize("name", sorted(ALL_LAYERS))
@pytest.mark.parametrize("training", [False, None])
def test_identity_when_not_training(batch, name, training):
    embeddings, mask, _ = batch
    layer = ALL_LAYERS[name](seed=0)
    outputs = _run(layer, tf.constant(embeddings), tf.constant(mask), training)
    expected = _inputs_of(layer, embeddings, mask)
    assert len(outputs) == len(expected)
    for out, ref in zip(outputs, expected):
        np.testing.assert_array_equal(np.asarray(out), ref)


@pytest.mark.parametrize("name", sorted(ALL_LAYERS))
@pytest.mark.parametrize("jit_compile", [False, True], ids=["graph", "xla"])
def test_tf_function_with_dynamic_shapes(batch_factory, name, jit_compile):
    layer = ALL_LAYERS[name](seed=0)

    @tf.function(
        jit_compile=jit_compile,
        input_signature=[
            tf.TensorSpec([None, None, None], tf.float32),
            tf.TensorSpec([None, None], tf.int32),
        ]
    )
    def step(embeddings, mask):
        return _run(layer, embeddings, mask, training=True)

    for lengths, seq_len, hidden in [((5, 3, 1), 6, 8), ((9, 2, 7, 9), 9, 12)]:
        embeddings, mask, _ = batch_factory(lengths, seq_len, hidden)
        outputs = step(tf.constant(embeddings), tf.constant(mask))
        expected = _inputs_of(layer, embeddings, mask)
        for out, ref in zip(outputs, expected):
            assert tuple(out.shape) == ref.shape
            assert out.dtype == tf.as_dtype(ref.dtype)
    # One trace for both shapes.
    assert step.experimental_get_tracing_count() == 1


@pytest.mark.parametrize("name", sorted(ALL_LAYERS))
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_reduced_precision_keeps_dtype(batch, name, dtype):
    embeddings, mask, _ = batch
    layer = ALL_LAYERS[name](seed=0)
    x = tf.cast(tf.constant(embeddings), dtype)
    outputs = _run(layer, x, tf.constant(mask), training=True)
    if layer.stage == "positions":
        assert outputs[0].dtype == tf.int32
        return
    assert outputs[0].dtype == tf.as_dtype(dtype)
    if "cutoff" in name or name == "dropout_exact":
        # Cutoffs only zero entries: all others are the input, bit for bit.
        out, ref = outputs[0].numpy(), x.numpy()
        kept = out != 0
        np.testing.assert_array_equal(out[kept], ref[kept])


@pytest.mark.parametrize("name", ["token_cutoff", "feature_cutoff", "span_cutoff_keep"])
def test_mixed_precision_policy(batch, name):
    embeddings, mask, _ = batch
    layer = RANDOM_LAYERS[name](seed=0, dtype="mixed_float16")
    x = tf.cast(tf.constant(embeddings), "float16")
    outputs = _run(layer, x, tf.constant(mask), training=True)
    assert outputs[0].dtype == tf.float16


@pytest.mark.parametrize("name", sorted(RANDOM_LAYERS))
def test_seed_reproducible(batch, name):
    embeddings, mask, _ = batch
    runs = []
    for seed in (123, 123, 456):
        layer = RANDOM_LAYERS[name](seed=seed)
        first = _run(layer, tf.constant(embeddings), tf.constant(mask), True)
        second = _run(layer, tf.constant(embeddings), tf.constant(mask), True)
        runs.append((np.asarray(first[0]), np.asarray(second[0])))
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    np.testing.assert_array_equal(runs[0][1], runs[1][1])
    # Successive calls draw new randomness; another seed gives another draw.
    assert not np.array_equal(runs[0][0], runs[0][1])
    assert not np.array_equal(runs[0][0], runs[2][0])


@pytest.mark.parametrize("cls", ALL_CLASSES, ids=lambda c: c.__name__)
def test_config_round_trip(cls):
    kwargs = {
        TokenShuffle: {"keep_special": True, "seed": 3},
        TokenCutoff: {"rate": 0.25, "seed": 3},
        FeatureCutoff: {"rate": 0.3, "seed": 3},
        SpanCutoff: {"rate": 0.4, "mode": "cut", "seed": 3},
        EmbeddingDropout: {"rate": 0.1, "mode": "exact", "seed": 3},
        AdversarialPerturbation: {"noise_norm": 0.005, "epsilon": 1e-8},
        IdentityView: {},
    }[cls]
    layer = cls(name="view", **kwargs)
    config = layer.get_config()
    for key, value in kwargs.items():
        assert config[key] == value
    restored = cls.from_config(config)
    assert restored.get_config() == config
    serialized = keras.saving.serialize_keras_object(layer)
    assert serialized["registered_name"] == f"keras_sentemb>{cls.__name__}"
    clone = keras.saving.deserialize_keras_object(serialized)
    assert type(clone) is cls
    assert clone.get_config() == config


@pytest.mark.parametrize("cls", RATE_LAYERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("rate", [-0.1, 1.0, 1.5])
def test_invalid_rate_raises(cls, rate):
    with pytest.raises(ValueError, match=f"rate={rate!r}"):
        cls(rate=rate)


@pytest.mark.parametrize("cls", RATE_LAYERS, ids=lambda c: c.__name__)
def test_non_numeric_rate_and_seed_raise(cls):
    with pytest.raises(ValueError, match="'high'"):
        cls(rate="high")
    with pytest.raises(ValueError, match="seed='x'"):
        cls(seed="x")


@pytest.mark.parametrize("cls", [TokenCutoff, FeatureCutoff, EmbeddingDropout])
def test_rate_zero_is_identity(batch, cls):
    embeddings, mask, _ = batch
    out = cls(rate=0.0, seed=0)(embeddings, padding_mask=mask, training=True)
    np.testing.assert_array_equal(np.asarray(out), embeddings)


@pytest.mark.parametrize("cls", RATE_LAYERS, ids=lambda c: c.__name__)
def test_wrong_rank_raises(cls):
    with pytest.raises(ValueError, match=r"rank 3.*\(2, 4\)"):
        cls()(np.zeros((2, 4), dtype="float32"), training=True)


@pytest.mark.parametrize("name", ["token_cutoff", "span_cutoff_keep", "token_shuffle"])
def test_symbolic_functional_model(batch, name):
    embeddings, mask, _ = batch
    layer = RANDOM_LAYERS[name](seed=0)
    if layer.stage == "positions":
        ids = keras.Input(shape=(None,), dtype="int32")
        m = keras.Input(shape=(None,), dtype="int32")
        model = keras.Model([ids, m], layer(ids, padding_mask=m))
        out = model([_inputs_of(layer, embeddings, mask)[0], mask])
        assert tuple(out.shape) == mask.shape
        return
    x = keras.Input(shape=(None, embeddings.shape[-1]))
    m = keras.Input(shape=(None,), dtype="int32")
    outputs = layer(x, padding_mask=m)
    model = keras.Model([x, m], outputs)
    out = model([embeddings, mask])
    if layer.updates_mask:
        out = out[0]
    np.testing.assert_array_equal(np.asarray(out), embeddings)  # inference


class TinyTrainer(keras.Model):
    """A model whose train_step applies a view, like the trainers do."""

    def __init__(self, view):
        super().__init__()
        self.view = view
        self.dense = keras.layers.Dense(1)

    def call(self, inputs, training=None):
        embeddings, mask = inputs
        outputs = self.view(embeddings, padding_mask=mask, training=training)
        if self.view.updates_mask:
            outputs, mask = outputs
        weights = tf.cast(mask, outputs.dtype)[..., None]
        pooled = tf.reduce_sum(outputs * weights, 1) / tf.reduce_sum(weights, 1)
        return self.dense(pooled)


@pytest.mark.parametrize(
    "name", ["feature_cutoff", "span_cutoff_keep", "dropout_exact"]
)
def test_inside_fit(batch, name):
    embeddings, mask, _ = batch
    model = TinyTrainer(RANDOM_LAYERS[name](seed=0))
    model.compile(optimizer="sgd", loss="mse")
    dataset = tf.data.Dataset.from_tensor_slices(
        ((embeddings, mask), np.zeros((len(mask), 1), "float32"))
    ).batch(4)
    history = model.fit(dataset, epochs=2, verbose=0, shuffle=False)
    assert np.isfinite(history.history["loss"]).all()

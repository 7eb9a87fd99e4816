"""Bucket-padded training batches: a handful of static shapes, the same vectors."""

import tensorflow as tf

from keras_sentemb.data.batching import bucket_widths
from keras_sentemb.data.batching import pad_to_bucket
from keras_sentemb.data.batching import shuffled_batches
from keras_sentemb.data.batching import tokenize_columns
from keras_sentemb.data.batching import with_text_views
from tests.conftest import make_tiny_encoder
from tests.helpers.corpora import UNEVEN_CORPUS as CORPUS
from tests.numeric import assert_close_vectors


def test_bucket_widths_are_capped_at_max_length():
    assert bucket_widths(32) == (8, 16, 24, 32)
    assert bucket_widths(20) == (8, 16, 20)
    assert bucket_widths(75) == (8, 16, 24, 32, 40, 48, 56, 64, 75)


def test_batches_take_bucket_widths_and_a_static_batch_size():
    enc = make_tiny_encoder()
    ds = tokenize_columns(enc, shuffled_batches({"sentence": CORPUS}, 4, seed=0),
                          ["sentence"], max_length=20)
    assert ds.element_spec["sentence"]["token_ids"].shape.as_list() == [4, None]
    widths = set()
    for batch in ds.take(30):
        packed = batch["sentence"]
        width = packed["token_ids"].shape[1]
        longest = int(packed["padding_mask"].numpy().sum(1).max())
        # The smallest bucket that holds the longest row.
        assert width == min(w for w in bucket_widths(20) if w >= longest)
        widths.add(width)
    assert widths <= {8, 16, 20} and len(widths) >= 2


def test_bucket_padding_keeps_the_pooled_vectors():
    enc = make_tiny_encoder()
    packed = enc.preprocess(tf.constant(CORPUS[4:7]), 64)
    padded = pad_to_bucket(packed, 64, enc.pad_token_id)
    assert packed["token_ids"].shape[1] == 10 and padded["token_ids"].shape[1] == 16
    assert (padded["token_ids"].numpy()[:, 10:] == enc.pad_token_id).all()
    assert (padded["padding_mask"].numpy()[:, 10:] == 0).all()
    for pooling in ("mean", "cls", "max"):
        assert_close_vectors(
            enc.sentence_vectors(padded, pooling).numpy(),
            enc.sentence_vectors(packed, pooling).numpy(),
            rtol=1e-5,
        )


def test_unbucketed_batches_keep_their_own_length():
    enc = make_tiny_encoder()
    ds = tokenize_columns(enc, shuffled_batches({"sentence": CORPUS}, 4, seed=0),
                          ["sentence"], max_length=20, buckets=False)
    for batch in ds.take(10):
        packed = batch["sentence"]
        assert packed["token_ids"].shape[1] == int(packed["padding_mask"].numpy().sum(1).max())


def test_training_pipelines_run_without_the_autotuner(monkeypatch):
    # tf.data's autotuner thread makes a freed iterator wait out its sleep
    # (up to a minute); every pipeline handed to Keras' fit turns it off.
    import keras

    import keras_sentemb

    enc = make_tiny_encoder()
    ds = tokenize_columns(enc, shuffled_batches({"sentence": CORPUS}, 4, seed=0), ["sentence"])
    assert ds.options().autotune.enabled is False
    from keras_sentemb.data.multitask import tokenize_multitask

    pairs = {"similarity": {"sentence1": tf.constant(["a man"]), "sentence2": tf.constant(["x"]),
                            "label": tf.constant([1.0]), "mask": tf.constant([1.0])}}
    multitask = tokenize_multitask(enc, tf.data.Dataset.from_tensors(pairs), 16)
    assert multitask.options().autotune.enabled is False
    assert next(iter(multitask))["similarity"]["sentence1"]["token_ids"].shape[0] == 1
    user = tf.data.Dataset.from_tensor_slices(CORPUS).with_options(tf.data.Options())
    assert user.options().autotune.enabled is None  # TensorFlow's default: on

    seen = []
    fit = keras.Model.fit

    def recording_fit(self, x=None, *args, **kwargs):
        seen.append(x.options().autotune.enabled)
        return fit(self, x, *args, **kwargs)

    monkeypatch.setattr(keras.Model, "fit", recording_fit)
    keras_sentemb.fit_simcse(user, model=enc, steps=2, batch_size=4, dev=None, verbose=0)
    keras_sentemb.fit_ct(CORPUS, model=make_tiny_encoder(), steps=2, batch_size=8, dev=None,
                         verbose=0)
    keras_sentemb.fit_flow(CORPUS, model=make_tiny_encoder(), steps=2, batch_size=8, dev=None,
                           verbose=0)
    assert seen == [False, False, False]


def _reversed_words(texts, key):
    """A test view: the words of each text in a random order drawn from `key`."""
    words = tf.strings.split(texts)
    order = tf.random.stateless_uniform(tf.shape(words.flat_values), seed=key)
    shuffled = tf.gather(words.flat_values, tf.argsort(
        order + tf.cast(words.value_rowids(), tf.float32) * 2.0))
    return tf.strings.reduce_join(words.with_flat_values(shuffled), axis=1, separator=" ")


def test_text_views_are_keyed_by_step_and_drawn_again_on_resume():
    sentences = [f"w{i} x{i} y{i} z{i} v{i}" for i in range(24)]
    views = {"a": ("s", _reversed_words), "b": ("s", _reversed_words)}

    def take(start, n):
        ds = with_text_views(shuffled_batches({"s": sentences}, 4, seed=1, start_step=start),
                             views, seed=1, start_step=start)
        return [{k: v.numpy().tolist() for k, v in batch.items()} for batch in ds.take(n)]

    full, resumed = take(0, 5), take(3, 2)
    assert full[3:] == resumed  # a resumed run draws the same views
    assert all(set(batch) == {"s", "a", "b"} for batch in full)
    for batch in full:
        for original, a in zip(batch["s"], batch["a"]):
            assert sorted(original.split()) == sorted(a.split())
    # Each view and each step has its own key.
    assert any(x != y for batch in full for x, y in zip(batch["a"], batch["b"]))
    assert take(0, 2) == full[:2]  # a pure function of (seed, step)


def test_text_views_are_tokenized_as_columns():
    encoder = make_tiny_encoder()
    ds = with_text_views(shuffled_batches({"s": CORPUS[:16]}, 4), {"v": ("s", _reversed_words)})
    batch = next(iter(tokenize_columns(encoder, ds, ["s", "v"], 16)))
    assert batch["v"]["token_ids"].shape[0] == 4
    assert (batch["v"]["padding_mask"].numpy().sum(1) == batch["s"]["padding_mask"].numpy().sum(1)
            ).all()

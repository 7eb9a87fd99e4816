"""How the tests that cover every method train a tiny model with ESimCSE, and its own checks.

Beyond the shared tiny run (save, reload, the same vectors), `check` tests
what is ESimCSE's own: the loss against its closed form in NumPy, word
repetition token by token, the momentum update and the queue.
"""

from keras_sentemb.methods.testing import MethodTest

SENTENCES = ["a man is playing the guitar .", "hello world", "x",
             "the cat sits on the mat in the park and the dog runs on the mat", ""]


def _trainer(encoder):
    from keras_sentemb.methods.esimcse.trainer import ESimCSE

    return ESimCSE(encoder, temperature=0.1, pooling="cls", mlp="train", momentum=0.9,
                   queue_ratio=1.5, dup_rate=0.2, batch_size=4, mini_batch_size=2)


def softmax_loss_reference(anchors, positives, queue, temperature):
    """The loss in NumPy: cosines over [positives; queue] / temperature, -log-softmax diagonal."""
    import numpy as np

    def unit(x):
        return x / np.linalg.norm(x, axis=-1, keepdims=True)

    candidates = positives if queue is None else np.concatenate([positives, queue])
    logits = unit(anchors).astype(np.float64) @ unit(candidates).T.astype(np.float64)
    logits /= temperature
    top = logits.max(axis=1, keepdims=True)
    log_softmax = logits - top - np.log(np.exp(logits - top).sum(axis=1, keepdims=True))
    return -np.mean(np.diag(log_softmax))


def check_loss():
    import numpy as np

    from keras_sentemb.methods.esimcse.trainer import esimcse_loss

    rng = np.random.default_rng(0)
    a, p, q = (rng.normal(size=shape).astype("float32") for shape in ((5, 8), (5, 8), (7, 8)))
    for queue in (None, q, q[:0]):
        for temperature in (0.05, 0.5):
            got = float(esimcse_loss(a, p, queue, temperature))
            want = softmax_loss_reference(a, p, None if queue is None or not len(queue)
                                          else queue, temperature)
            assert abs(got - want) <= 1e-5 * abs(want), (got, want)


def expected_view(ids, counts, max_length):
    """The repeated view of one packed row in plain Python: each token `count` times, in place."""
    length = int((counts > 0).sum())
    body = [int(t) for t, c in zip(ids[1:length - 1], counts[1:length - 1]) for _ in range(c)]
    return [int(ids[0])] + body[: max_length - 2] + [int(ids[length - 1])]


def check_rows(packed, counts, view, dup_rate, max_length):
    """Each row of `view` against `expected_view` and the rules of the draw."""
    import numpy as np

    ids, mask = packed["token_ids"].numpy(), packed["padding_mask"].numpy()
    counts, out = counts.numpy(), view["token_ids"].numpy()
    out_mask = view["padding_mask"].numpy()
    assert out.shape[1] <= max_length
    for row in range(len(ids)):
        length = int(mask[row].sum())
        n = length - 2
        assert counts[row, 0] == counts[row, length - 1] == 1  # the special tokens
        assert (counts[row, length:] == 0).all()  # the padding
        assert set(counts[row, 1:length - 1]) <= {1, 2}
        dup_len = int(counts[row].sum()) - length
        assert 0 <= dup_len <= min(n, max(2, int(dup_rate * n))), (row, dup_len, n)
        want = expected_view(ids[row], counts[row], max_length)
        new_length = int(out_mask[row].sum())
        assert new_length == min(length + dup_len, max_length), (row, new_length)
        assert list(out[row, :new_length]) == want, (row, list(out[row]), want)
        assert (out_mask[row, new_length:] == 0).all()
    return np.asarray(counts)


def check_repetition(encoder):
    import numpy as np
    import tensorflow as tf

    from keras_sentemb.methods.esimcse.repetition import repeat_tokens
    from keras_sentemb.methods.esimcse.repetition import repetition_counts
    from keras_sentemb.methods.esimcse.repetition import word_repetition

    ids = (encoder.start_token_id, encoder.end_token_id, encoder.pad_token_id)
    for max_length, dup_rate in ((32, 0.32), (8, 0.32), (16, 1.0), (32, 0.0)):
        packed = encoder.preprocess(tf.constant(SENTENCES), max_length)
        for seed in range(4):
            key = tf.constant([seed, 7], tf.int64)
            counts = repetition_counts(packed, key, dup_rate)
            view = repeat_tokens(packed, counts, max_length, *ids)
            check_rows(packed, counts, view, dup_rate, max_length)
            again = word_repetition(encoder, packed, key, dup_rate, max_length, buckets=False)
            assert all((again[k].numpy() == view[k].numpy()).all() for k in view)
            bucketed = word_repetition(encoder, packed, key, dup_rate, max_length)
            assert bucketed["token_ids"].shape[1] <= max_length
    # The draws: dup_len uniform over [0, max(2, int(0.32 * 10))] = [0, 3], every position.
    packed = encoder.preprocess(tf.constant(["a man is playing the guitar in the park ."] * 400))
    counts = repetition_counts(packed, tf.constant([3, 1], tf.int64), 0.32).numpy()
    dup_len = counts.sum(axis=1) - 12
    assert set(dup_len) == {0, 1, 2, 3} and min(np.bincount(dup_len)) > 60, np.bincount(dup_len)
    assert (counts[:, 1:11] == 2).any(axis=0).all()
    other = repetition_counts(packed, tf.constant([4, 1], tf.int64), 0.32).numpy()
    assert (other != counts).any()


def check_resumed_views(encoder):
    """A pipeline started at step 2 draws the views the full pipeline drew at step 2."""
    import tensorflow as tf

    from keras_sentemb.methods.esimcse.repetition import with_word_repetition

    batches = [encoder.preprocess(tf.constant(SENTENCES[i:] + SENTENCES[:i]), 16)
               for i in range(4)]

    def make_dataset(start_step):
        return tf.data.Dataset.from_tensor_slices(list(range(4))).skip(start_step).map(
            lambda i: {"sentence": tf.nest.map_structure(lambda *x: tf.stack(x)[i], *batches)})

    make = with_word_repetition(make_dataset, encoder, 5, 0.5, 16)
    full = list(make(0))
    resumed = list(make(2))
    for a, b in zip(full[2:], resumed):
        assert (a["positive"]["token_ids"].numpy() == b["positive"]["token_ids"].numpy()).all()


def check_momentum_and_queue(encoder):
    import keras
    import numpy as np
    import tensorflow as tf

    from keras_sentemb.methods.esimcse.repetition import word_repetition
    from keras_sentemb.methods.esimcse.trainer import ESimCSE
    from keras_sentemb.methods.esimcse.trainer import encoder_weights

    trainer = ESimCSE(encoder.clone("online"), pooling="mean", mlp="none", momentum=0.9,
                      queue_ratio=1.5, batch_size=4)
    assert trainer.queue.size == 6
    momentum_vars = encoder_weights(trainer.momentum_encoder)
    trainable = {id(v) for v in trainer.trainable_variables}
    assert not any(id(v) in trainable for v in momentum_vars)
    trainer.compile(optimizer=keras.optimizers.SGD(0.5))
    packed = trainer.encoder.preprocess(tf.constant(SENTENCES[:4]), 16)
    data = {"sentence": packed,
            "positive": word_repetition(trainer.encoder, packed, tf.constant([1, 2], tf.int64),
                                        0.32, 16)}
    with tf.GradientTape() as tape:
        loss = trainer.compute_loss_terms(data, training=True).loss
    assert all(g is None for g in tape.gradient(loss, momentum_vars))
    keys = trainer.momentum_embed(data["positive"], training=True).numpy()
    before = [v.numpy() for v in momentum_vars]
    assert all(np.array_equal(m, w.numpy()) for m, w in zip(before, encoder_weights(
        trainer.encoder)))  # the copy starts equal
    tf.function(trainer.train_step)(data)
    after_online = [v.numpy() for v in encoder_weights(trainer.encoder)]
    assert any(not np.array_equal(a, b) for a, b in zip(after_online, before))
    for m, m0, w in zip(momentum_vars, before, after_online):
        np.testing.assert_allclose(m.numpy(), 0.9 * m0 + 0.1 * w, rtol=1e-5, atol=1e-6)
    # The step's momentum keys are the queue's first rows; later rows enter first in, first out.
    np.testing.assert_allclose(trainer.queue.ordered().numpy(), keys, rtol=1e-4, atol=1e-5)
    rows = np.arange(3 * trainer.queue.dim, dtype="float32").reshape(3, -1)
    trainer.after_update(tf.constant(rows), tf.constant(True))
    np.testing.assert_allclose(trainer.queue.ordered().numpy(),
                               np.concatenate([keys, rows])[-6:], rtol=1e-4, atol=1e-5)
    # A skipped step leaves the momentum encoder as it was.
    kept = [v.numpy() for v in momentum_vars]
    trainer.update_momentum_encoder(tf.constant(False))
    assert all(np.array_equal(a, v.numpy()) for a, v in zip(kept, momentum_vars))


def check_repetition_alone(encoder):
    import tensorflow as tf

    from keras_sentemb.methods.esimcse.trainer import ESimCSE

    trainer = ESimCSE(encoder.clone("alone"), pooling="mean", mlp="none", queue_ratio=0.0)
    assert trainer.queue is None and trainer.momentum_encoder is None
    packed = trainer.encoder.preprocess(tf.constant(SENTENCES[:4]), 16)
    out = trainer.compute_loss_terms({"sentence": packed, "positive": packed}, training=True)
    assert out.aux is None and bool(tf.math.is_finite(out.loss))


def check_views(encoder):
    """ConSERT's views: the first acts on the sentence, the second on its repeated positive, in
    training only; the momentum encoder's queue rows get neither."""
    import numpy as np
    import tensorflow as tf

    from keras_sentemb.augment.identity_view import IdentityView
    from keras_sentemb.augment.token_shuffle import TokenShuffle
    from keras_sentemb.augment.feature_cutoff import FeatureCutoff
    from keras_sentemb.methods.esimcse.config import ESimCSEConfig
    from keras_sentemb.methods.esimcse.repetition import word_repetition
    from keras_sentemb.methods.esimcse.trainer import ESimCSE

    class Spy(IdentityView):
        """Records the padding mask of every call in training."""

        def __init__(self):
            super().__init__()
            self.masks = []

        def call(self, embeddings, padding_mask=None, training=None):
            if training:
                self.masks.append(np.asarray(padding_mask))
            return embeddings

    trainer = ESimCSE(encoder.clone("views"), pooling="mean", mlp="none", queue_ratio=1.0,
                      batch_size=4, views="shuffle,feature_cutoff", view_rates="none,0.1", seed=3)
    shuffle, cutoff = trainer.view_layers
    assert isinstance(shuffle, TokenShuffle) and isinstance(cutoff, FeatureCutoff)
    assert cutoff.rate == 0.1 and trainer.get_config()["seed"] == 3
    packed = trainer.encoder.preprocess(tf.constant(SENTENCES[:4]), 16)
    data = {"sentence": packed,
            "positive": word_repetition(trainer.encoder, packed, tf.constant([1, 2], tf.int64),
                                        1.0, 16)}
    out = trainer.compute_loss_terms(data, training=True)
    assert bool(tf.math.is_finite(out.loss))
    trainer.view_layers = [Spy(), Spy()]
    trainer.embed_batch(data, training=True)
    first, second = (spy.masks for spy in trainer.view_layers)
    assert len(first) == len(second) == 1  # the momentum pass goes through neither
    np.testing.assert_array_equal(first[0], packed["padding_mask"].numpy())
    np.testing.assert_array_equal(second[0], data["positive"]["padding_mask"].numpy())
    trainer.embed_batch(data, training=False)
    assert len(first) == len(second) == 1
    # The paper's setting has no views; a bad pair is one line.
    assert ESimCSEConfig().views == "none,none"
    for views, rates in ((("shuffle",), None), ("shuffle,adversarial", None),
                         ("none,none", "0.1,2"), ("none,none", "a,b")):
        try:
            ESimCSEConfig(views=views, view_rates=rates)
        except ValueError as error:
            assert "\n" not in str(error) and "view" in str(error), error
        else:
            raise AssertionError((views, rates))


def check_repetition_in_a_template(encoder):
    """With a prompt template, the sentence's tokens alone are repeated and the view is framed
    in the template, as the sentence is."""
    import numpy as np
    import tensorflow as tf

    from keras_sentemb.methods.esimcse.repetition import repetition_counts
    from keras_sentemb.methods.esimcse.repetition import word_repetition

    encoder = encoder.clone("prompted")
    encoder.prompt = "the [X] is [MASK] ."
    prompt = encoder.prompt
    lead = [encoder.start_token_id, *prompt.prefix]
    tail = [*prompt.suffix, encoder.end_token_id]
    packed = encoder.preprocess(tf.constant(SENTENCES), 16)
    ids, mask = packed["token_ids"].numpy(), packed["padding_mask"].numpy()
    for seed in range(4):
        key = tf.constant([seed, 3], tf.int64)
        counts = repetition_counts(packed, key, 1.0, prompt.prefix, prompt.suffix).numpy()
        view = word_repetition(encoder, packed, key, 1.0, 16)
        for r, (row_ids, row_mask) in enumerate(zip(view["token_ids"].numpy(),
                                                    view["padding_mask"].numpy())):
            row = [int(t) for t, m in zip(row_ids, row_mask) if m]
            assert row[:len(lead)] == lead and row[len(row) - len(tail):] == tail, row
            n = int(mask[r].sum())
            sentence = slice(len(lead), n - len(tail))  # the sentence's tokens, template left out
            assert (counts[r, :len(lead)] == 1).all() and (counts[r, n - len(tail):n] == 1).all()
            want = np.repeat(ids[r, sentence], counts[r, sentence])[:14].tolist()
            assert row[len(lead):len(row) - len(tail)] == want, (row, want)


def check(encoder, folder):
    """ESimCSE's own checks, on the tiny run's encoder (its tokenizer and weights)."""
    del folder
    check_loss()
    check_repetition(encoder)
    check_repetition_in_a_template(encoder)
    check_resumed_views(encoder)
    check_momentum_and_queue(encoder)
    check_repetition_alone(encoder)
    check_views(encoder)


METHOD_TEST = MethodTest(make_trainer=_trainer, check=check, every_family=True)

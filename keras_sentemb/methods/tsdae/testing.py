"""How the tests that cover every method train a tiny model with TSDAE, and its own checks.

Beyond the shared tiny run (save, reload, the same vectors), `check` tests
what is TSDAE's own: the word deletion, the loss against its closed form
in NumPy, the decoder's tied weights and its causal mask; `reference`
checks the loss against sentence-transformers' `DenoisingAutoEncoderLoss`
on the same batch and weights.
"""

from pathlib import Path

from keras_sentemb.methods.testing import MethodTest

SENTENCES = ["a man is playing the guitar .", "hello world",
             "the cat sits on the mat in the park", "x"]
NOISY = ["man guitar", "world", "cat mat park", "x"]


def _trainer(encoder):
    from keras_sentemb.methods.tsdae.trainer import TSDAE

    return TSDAE(encoder, deletion_rate=0.3, tie_decoder=False, pooling="mean", seed=5)


def _batch(encoder, noisy=NOISY, sentences=SENTENCES, length=16):
    import tensorflow as tf

    return {"noisy": encoder.preprocess(tf.constant(noisy), length),
            "sentence": encoder.preprocess(tf.constant(sentences), length)}


def _scramble_decoder(trainer, seed=0):
    """Random values for the decoder's own weights (LayerNorms included), so that none is trivial."""
    import numpy as np

    rng = np.random.default_rng(seed)
    own = [v for layer in (*trainer.decoder.cross, trainer.decoder.lm_head)
           for v in layer.weights if "token_embedding" not in v.path]
    for v in own:
        base = 1.0 if v.path.endswith("gamma") else 0.0
        v.assign(base + rng.normal(scale=0.2, size=v.shape).astype("float32"))


def reference_loss(logits, target_ids, target_mask):
    """The loss in NumPy: next-token cross-entropy, mean over the real target tokens after the first."""
    import numpy as np

    logits = np.asarray(logits, np.float64)
    labels, weights = target_ids[:, 1:], target_mask[:, 1:].astype(np.float64)
    top = logits.max(-1, keepdims=True)
    log_softmax = logits - top - np.log(np.exp(logits - top).sum(-1, keepdims=True))
    picked = np.take_along_axis(log_softmax, labels[..., None], -1)[..., 0]
    return float(-(picked * weights).sum() / weights.sum())


def check_loss(encoder):
    import numpy as np

    from keras_sentemb.methods.tsdae.trainer import TSDAE

    trainer = TSDAE(encoder.clone("closed_form"), pooling="cls", seed=1)
    _scramble_decoder(trainer)
    batch = _batch(trainer.encoder)
    logits = trainer.logits(batch, training=False).numpy()
    target = batch["sentence"]
    got = float(trainer.compute_loss_terms(batch, training=False).loss)
    want = reference_loss(logits, target["token_ids"].numpy(), target["padding_mask"].numpy())
    assert abs(got - want) <= 1e-5 * abs(want), (got, want)
    # The padding is ignored: a row padded wider gives the same loss.
    wider = _batch(trainer.encoder, length=24)
    assert abs(float(trainer.compute_loss_terms(wider, training=False).loss) - got) <= 1e-4 * got
    assert np.isfinite(logits).all()


def check_causal_and_memory_only(encoder):
    """A position's logits depend on the earlier tokens and the vector, nothing else."""
    import numpy as np
    import tensorflow as tf

    from keras_sentemb.methods.tsdae.trainer import TSDAE

    trainer = TSDAE(encoder.clone("causal"), pooling="cls", seed=2)
    _scramble_decoder(trainer)
    packed = trainer.encoder.preprocess(tf.constant(["a man is playing the guitar ."]), 16)
    ids = packed["token_ids"].numpy()
    changed = dict(packed, token_ids=tf.constant(np.where(
        np.arange(ids.shape[1]) == 5, ids[0, 2], ids)))
    memory = tf.random.stateless_normal([1, trainer.encoder.output_dim], seed=[1, 2])
    a = trainer.decoder(packed, memory).numpy()
    b = trainer.decoder(changed, memory).numpy()
    np.testing.assert_allclose(a[:, :5], b[:, :5], rtol=1e-5, atol=1e-5)
    assert not np.allclose(a[:, 5:], b[:, 5:])
    c = trainer.decoder(packed, memory + 1.0).numpy()
    assert not np.allclose(a[:, 0], c[:, 0])


def check_tied_and_untied(encoder):
    import numpy as np

    from keras_sentemb.methods.tsdae.trainer import TSDAE

    tied = TSDAE(encoder.clone("tied"), pooling="cls")
    assert tied.decoder.body is tied.encoder
    ids = {id(v) for v in tied.encoder.weights}
    assert tied.decoder.lm_head.token_embedding.embeddings.path.endswith("token_embedding/"
                                                                          "embeddings")
    assert id(tied.decoder.lm_head.token_embedding.embeddings) in ids
    untied = TSDAE(encoder.clone("untied"), pooling="cls", tie_decoder=False)
    body = untied.decoder.body
    assert body is not untied.encoder
    assert not ({id(v) for v in body.weights} & {id(v) for v in untied.encoder.weights})
    for a, b in zip(body.backbone.weights, untied.encoder.backbone.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())  # a copy of the start


def check_deletion():
    import numpy as np
    import tensorflow as tf

    from keras_sentemb.methods.tsdae.noise import delete_words
    from keras_sentemb.methods.tsdae.noise import split_words

    texts = tf.constant(["Hello, world! This is a test.", "", "   ", "one",
                         "北京大学 is great", "café naïve résumé"])
    words = split_words(texts).to_list()
    assert [w.decode() for w in words[0]] == ["Hello", ",", "world", "!", "This", "is", "a",
                                              "test", "."]
    assert len(words[4]) == 6 and words[1] == words[2] == []
    for seed in range(20):
        out = [t.decode() for t in delete_words(texts, tf.constant([seed, 3], tf.int64),
                                                0.6).numpy()]
        assert out[1:4] == ["", "   ", "one"]  # no words: as it was; one word: kept
        for row, text in enumerate(out):
            kept = text.split()
            source = [w.decode() for w in words[row]]
            assert (len(kept) >= 1) == bool(source)
            it = iter(source)
            assert all(word in it for word in kept), (source, kept)  # a subsequence, in order
    same = delete_words(texts, tf.constant([4, 4], tf.int64), 0.6).numpy()
    again = delete_words(texts, tf.constant([4, 4], tf.int64), 0.6).numpy()
    assert (same == again).all()
    assert (delete_words(texts, tf.constant([1, 1], tf.int64), 0.0).numpy()[0]
            == b"Hello , world ! This is a test .")
    assert all(len(t.split()) == (1 if t.strip() else 0) for t in
               delete_words(texts, tf.constant([1, 1], tf.int64), 1.0).numpy())
    # The rate: 0.6 of 40 words deleted on average.
    long = tf.constant([" ".join(f"w{i}" for i in range(40))] * 500)
    kept = np.array([len(t.split()) for t in delete_words(long, tf.constant([9, 9], tf.int64),
                                                          0.6).numpy()])
    assert abs(kept.mean() / 40 - 0.4) < 0.01, kept.mean()


def check_views_in_the_pipeline(folder):
    """The run's batches: a noisy column of deleted words, drawn again the same on resume."""
    import tensorflow as tf

    from keras_sentemb.data.batching import shuffled_batches
    from keras_sentemb.data.batching import with_text_views
    from keras_sentemb.methods.tsdae.noise import deletion_view

    del folder
    sentences = [f"word{i} and word{i + 1} then word{i + 2} ." for i in range(32)]
    views = {"noisy": ("sentence", deletion_view(0.6))}

    def rows(start):
        ds = with_text_views(shuffled_batches({"sentence": sentences}, 8, seed=3,
                                              start_step=start), views, 3, start)
        return [(b["sentence"].numpy().tolist(), b["noisy"].numpy().tolist())
                for b in ds.take(4 - start)]

    full, resumed = rows(0), rows(2)
    assert full[2:] == resumed
    for originals, noisy in full:
        assert all(len(n.split()) < len(o.split()) + 1 for o, n in zip(originals, noisy))
        assert any(n != o for o, n in zip(originals, noisy))
    assert tf.constant(full[0][1]).shape == [8]


def check(encoder, folder):
    """TSDAE's own checks, on the tiny run's encoder (its tokenizer and weights)."""
    check_deletion()
    check_views_in_the_pipeline(folder)
    check_loss(encoder)
    check_causal_and_memory_only(encoder)
    check_tied_and_untied(encoder)


def reference(encoder, folder, worker):
    """The loss equals sentence-transformers' `DenoisingAutoEncoderLoss` on one batch."""
    from keras_sentemb.export.huggingface import export_huggingface
    from keras_sentemb.methods.tsdae.trainer import TSDAE

    encoder.pooling = "cls"
    export_huggingface(encoder, folder / "st", verify=False)
    trainer = TSDAE(encoder, pooling="cls", seed=3)
    _scramble_decoder(trainer, seed=4)
    batch = _batch(encoder)
    ours = float(trainer.compute_loss_terms(batch, training=False).loss)
    arrays = {"noisy_ids": batch["noisy"]["token_ids"].numpy(),
              "noisy_mask": batch["noisy"]["padding_mask"].numpy(),
              "target_ids": batch["sentence"]["token_ids"].numpy(),
              "target_mask": batch["sentence"]["padding_mask"].numpy()}
    for i, cross in enumerate(trainer.decoder.cross):
        arrays.update({
            f"cross{i}_value_kernel": cross.value_dense.kernel.numpy(),
            f"cross{i}_value_bias": cross.value_dense.bias.numpy(),
            f"cross{i}_output_kernel": cross.output_dense.kernel.numpy(),
            f"cross{i}_output_bias": cross.output_dense.bias.numpy(),
            f"cross{i}_gamma": cross.layer_norm.gamma.numpy(),
            f"cross{i}_beta": cross.layer_norm.beta.numpy()})
    head = {v.path.split("/", 1)[1]: v.numpy() for v in trainer.decoder.lm_head.weights
            if "token_embedding" not in v.path}
    arrays.update(head_kernel=head["intermediate_dense/kernel"],
                  head_bias=head["intermediate_dense/bias"],
                  head_gamma=head["intermediate_layer_norm/gamma"],
                  head_beta=head["intermediate_layer_norm/beta"],
                  head_output_bias=head["output_bias"])
    answer, _ = worker.call(Path(__file__).with_name("torch_reference.py"), "tsdae_loss",
                            folder=folder / "st", inputs=worker.save_inputs(**arrays))
    assert abs(ours - answer["loss"]) <= 1e-4 * abs(answer["loss"]), (ours, answer["loss"])


METHOD_TEST = MethodTest(make_trainer=_trainer, check=check, reference=reference,
                         every_family=True)

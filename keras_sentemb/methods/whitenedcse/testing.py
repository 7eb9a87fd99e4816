"""How the tests that cover every method train a tiny model with WhitenedCSE, and its own checks.

Beyond the shared tiny run (save, reload, the same vectors), `check` tests
what is WhitenedCSE's own: shuffled group whitening against its closed form
in NumPy (each group's covariance the identity after it; the channels back in
their places; no gradient through the covariance), the loss against its
closed form, the trainer's views (each whitened with its own
permutation, none outside training, the same draws on a replayed step), and
the positives taken from ESimCSE's repeated copies with `dup_rate`.

No `reference`: the official module (SupstarZh/WhitenedCSE
`whitenedcse/shuffled_group_whitening.py`) is not an installable package and
calls `torch.symeig`, which current PyTorch no longer has; its arithmetic is
the few lines `reference_whitening` follows term by term (with
`numpy.linalg.eigh` for `symeig`).
"""

from keras_sentemb.methods.testing import MethodTest


def _trainer(encoder):
    from keras_sentemb.methods.whitenedcse.trainer import WhitenedCSE

    return WhitenedCSE(encoder, temperature=0.1, positives=3, group_size=8, shuffle=False,
                       epsilon=1e-4, pooling="cls", mlp="train", seed=3)


def reference_whitening(x, permutation, group_size, epsilon):
    """The official transform in NumPy (float64): shuffle, group, centre, ZCA, unshuffle."""
    import numpy as np

    x = np.asarray(x, np.float64)
    n, d = x.shape
    groups = d // group_size
    shuffled = x[:, permutation].reshape(n, groups, group_size)
    centred = (shuffled - shuffled.mean(axis=0, keepdims=True)).transpose(1, 0, 2)
    out = np.empty_like(centred)
    for g in range(groups):
        covariance = centred[g].T @ centred[g] / n
        s, u = np.linalg.eigh(covariance)
        out[g] = centred[g] @ (u @ np.diag((s + epsilon) ** -0.5) @ u.T)
    flat = out.transpose(1, 0, 2).reshape(n, d)
    return flat[:, np.argsort(permutation)]


def check_whitening():
    import numpy as np
    import tensorflow as tf

    from keras_sentemb.methods.whitenedcse.whitening import group_whitening

    rng = np.random.default_rng(0)
    # Correlated channels of unequal scale, as pooled vectors are.
    x = (rng.normal(size=(64, 12)) @ rng.normal(size=(12, 12)) * 3.0 + 5.0).astype("float32")
    for group_size, permutation in ((4, rng.permutation(12)), (3, np.arange(12)),
                                    (12, rng.permutation(12)), (1, rng.permutation(12))):
        got = group_whitening(x, permutation, group_size, 1e-6).numpy()
        want = reference_whitening(x, permutation, group_size, 1e-6)
        scale = np.abs(want).max()
        assert np.abs(got - want).max() <= 1e-3 * scale, (group_size, got, want)
        # Each group, in the permuted order, has zero mean and the identity covariance.
        grouped = got[:, permutation].reshape(64, -1, group_size)
        assert np.abs(grouped.mean(axis=0)).max() <= 1e-4
        for g in range(grouped.shape[1]):
            covariance = grouped[:, g].T @ grouped[:, g] / 64
            assert np.abs(covariance - np.eye(group_size)).max() <= 2e-3, covariance
    # The whitening matrix is a constant of the step: the gradient is that of the centred
    # product with each group's W held fixed (computed apart, as a constant).
    permutation = rng.permutation(12)
    weights = tf.constant(rng.normal(size=(64, 12)).astype("float32"))
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        value = tf.reduce_sum(group_whitening(xt, permutation, 4, 1e-6) * weights)
    got = tape.gradient(value, xt).numpy()
    centred = x - x.mean(axis=0)
    grouped = centred[:, permutation].reshape(64, 3, 4).transpose(1, 0, 2).astype(np.float64)
    fixed = []
    for g in range(3):
        s, u = np.linalg.eigh(grouped[g].T @ grouped[g] / 64)
        fixed.append(u @ np.diag((s + 1e-6) ** -0.5) @ u.T)
    fixed = tf.constant(np.stack(fixed), tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        shuffled = tf.reshape(tf.gather(xt, permutation, axis=1), [64, 3, 4])
        centred_t = tf.transpose(shuffled - tf.reduce_mean(shuffled, 0, keepdims=True), [1, 0, 2])
        out = tf.reshape(tf.transpose(tf.matmul(centred_t, fixed), [1, 0, 2]), [64, 12])
        value = tf.reduce_sum(tf.gather(out, np.argsort(permutation), axis=1) * weights)
    want = tape.gradient(value, xt).numpy()
    assert np.abs(got - want).max() <= 1e-3 * np.abs(want).max(), (got, want)


def check_loss():
    import numpy as np

    from keras_sentemb.methods.whitenedcse.trainer import whitenedcse_loss

    def info_nce(a, p, temperature):
        a = a / np.linalg.norm(a, axis=-1, keepdims=True)
        p = p / np.linalg.norm(p, axis=-1, keepdims=True)
        logits = a.astype(np.float64) @ p.T.astype(np.float64) / temperature
        top = logits.max(axis=1, keepdims=True)
        log_softmax = logits - top - np.log(np.exp(logits - top).sum(axis=1, keepdims=True))
        return -np.mean(np.diag(log_softmax))

    rng = np.random.default_rng(1)
    views = [rng.normal(size=(6, 8)).astype("float32") for _ in range(4)]
    for count in (2, 3, 4):
        for temperature in (0.05, 0.5):
            loss, parts = whitenedcse_loss(views[:count], temperature)
            want = [info_nce(views[0], v, temperature) for v in views[1:count]]
            assert abs(float(loss) - sum(want)) <= 1e-5 * sum(want), (float(loss), want)
            assert sorted(parts) == [f"info_nce_{k}" for k in range(1, count)]
            for k, w in enumerate(want, start=1):
                assert abs(float(parts[f"info_nce_{k}"]) - w) <= 1e-5 * w


def check_trainer(encoder):
    """The trainer's views: whitened in training with their own permutations, never outside."""
    import numpy as np
    import tensorflow as tf

    from keras_sentemb.methods.whitenedcse.trainer import WhitenedCSE
    from keras_sentemb.methods.whitenedcse.whitening import ShuffledGroupWhitening

    sentences = [f"sentence number {i} about {w}" for i, w in
                 enumerate(["cats", "dogs", "the sea", "music", "rain", "a town", "trees", "x"])]
    trainer = WhitenedCSE(encoder.clone("whitenedcse_check"), pooling="mean", mlp="none",
                          group_size=4, positives=2, temperature=0.1, seed=11)
    batch = {"sentence": trainer.encoder.preprocess(tf.constant(sentences), 16)}
    # Outside training: no whitening, no dropout, every view the encoder's own vector.
    plain = trainer.embed_batch(batch, training=False)
    own = trainer.encoder.encode(sentences, pooling="mean", normalize=False)
    for k in range(3):
        a, b = plain[f"view_{k}"].numpy(), np.asarray(own)
        cosine = (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)
        assert cosine.min() >= 0.9999, cosine
    # In training: three draws from the layer's generator, one per view, each whitened.
    drawn = []
    layer = trainer.whitening
    original = layer.permutation

    def spy(width):
        permutation = original(width)
        drawn.append(permutation.numpy())
        return permutation

    layer.permutation = spy
    try:
        views = trainer.embed_batch(batch, training=True)
    finally:
        del layer.permutation
    assert len(drawn) == 3 and all(sorted(p) == list(range(32)) for p in drawn)
    assert len({tuple(p) for p in drawn}) == 3, "each view draws its own permutation"
    for k, permutation in enumerate(drawn):
        grouped = views[f"view_{k}"].numpy()[:, permutation].reshape(8, -1, 4)
        for g in range(grouped.shape[1]):
            covariance = grouped[:, g].T @ grouped[:, g] / 8
            assert np.abs(covariance - np.eye(4)).max() <= 5e-2, covariance
    # The loss is the closed form of the views it was given.
    out = trainer.loss_from_embeddings(views, batch)
    assert bool(tf.math.is_finite(out.loss)) and set(out.metrics) == {"info_nce_1",
                                                                     "info_nce_2"}
    # A width the groups do not divide is one line.
    try:
        ShuffledGroupWhitening(5).build((None, 32))
    except ValueError as error:
        assert "must divide" in str(error) and "\n" not in str(error)
    else:
        raise AssertionError("group_size 5 of a 32-wide vector must be refused")


def check_repetition(encoder):
    """`dup_rate`: the positives are views of the batch's `"positive"` (the repeated copies)."""
    import numpy as np
    import tensorflow as tf

    from keras_sentemb.methods.whitenedcse import fit_whitenedcse
    from keras_sentemb.methods.whitenedcse.trainer import WhitenedCSE

    sentences = [f"sentence number {i} about {w}" for i, w in
                 enumerate(["cats", "dogs", "the sea", "music", "rain", "a town", "trees", "x"])]
    copies = [s.replace("number", "number number") for s in sentences]
    trainer = WhitenedCSE(encoder.clone("whitenedcse_repetition"), pooling="mean", mlp="none",
                          group_size=4, positives=2, dup_rate=0.3)
    preprocess = trainer.encoder.preprocess
    views = trainer.embed_batch({"sentence": preprocess(tf.constant(sentences), 16),
                                 "positive": preprocess(tf.constant(copies), 16)},
                                training=False)
    for k, text in ((0, sentences), (1, copies), (2, copies)):
        a = views[f"view_{k}"].numpy()
        b = np.asarray(trainer.encoder.encode(text, pooling="mean"))
        cosine = (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)
        assert cosine.min() >= 0.9999, (k, cosine)
    # End to end: the run adds the repeated copies and trains on them.
    trained = fit_whitenedcse([f"line {i} of the corpus" for i in range(40)], model=encoder,
                              steps=2, batch_size=8, group_size=4, max_length=12,
                              dup_rate=0.32, dev=None, verbose=0)
    assert np.isfinite(trained.encode(["a line"])).all()


def check_refusals(encoder):
    """A batch no larger than a group, and a group size that does not divide the width."""
    from keras_sentemb.methods.whitenedcse import fit_whitenedcse

    sentences = [f"line {i}" for i in range(20)]
    for options, words in (({"batch_size": 4, "group_size": 4}, "larger than group_size"),
                           ({"batch_size": 8, "group_size": 5}, "must divide")):
        try:
            fit_whitenedcse(sentences, model=encoder, steps=1, max_length=8,
                            dev=None, verbose=0, **options)
        except ValueError as error:
            assert words in str(error) and "\n" not in str(error), str(error)
        else:
            raise AssertionError(f"{options} must be refused")


def check(encoder, folder):
    """WhitenedCSE's own checks, on the tiny run's encoder (its tokenizer and weights)."""
    check_whitening()
    check_loss()
    check_trainer(encoder)
    check_repetition(encoder)
    check_refusals(encoder)


METHOD_TEST = MethodTest(options={"group_size": 4}, make_trainer=_trainer, check=check)

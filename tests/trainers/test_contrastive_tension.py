import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_sentemb.data.batching import tokenize_columns
from keras_sentemb.data.ct_sampler import ct_pair_dataset
from keras_sentemb.losses.loss_output import LossOutput
from keras_sentemb.methods.contrastive_tension.trainer import ContrastiveTension
from tests.conftest import REPO, make_tiny_encoder
from tests.helpers.corpora import CORPUS


def ct_data(encoder, k=7, batch=16, sentences=CORPUS):
    ds = ct_pair_dataset(sentences, batch, k, seed=1)
    return tokenize_columns(encoder, ds, ["left", "right"])


def test_sampler_layout_and_labels():
    batch = next(iter(ct_pair_dataset(CORPUS, 16, 7, seed=3)))
    left, right = batch["left"].numpy(), batch["right"].numpy()
    labels = batch["labels"].numpy()
    np.testing.assert_array_equal(labels, [1] + [0] * 7 + [1] + [0] * 7)
    for i in (0, 8):
        assert left[i] == right[i]
    assert sum(left[i] != right[i] for i in range(16) if labels[i] == 0) >= 12


def test_sampler_draws_from_the_whole_corpus_and_is_reproducible():
    sentences = [f"s{i}" for i in range(1000)]
    ds = ct_pair_dataset(sentences, 16, 7, seed=0).take(400)
    seen = set()
    for b in ds:
        seen.update(b["left"].numpy().tolist())
    assert len(seen) > 950  # 400 x 16 draws cover the corpus, not its head
    a = next(iter(ct_pair_dataset(sentences, 16, 7, seed=0, start_step=5)))
    b = list(ct_pair_dataset(sentences, 16, 7, seed=0).take(6))[-1]
    np.testing.assert_array_equal(a["left"].numpy(), b["left"].numpy())


def test_sampler_validation():
    with pytest.raises(ValueError, match="multiple of K \\+ 1 = 8"):
        ct_pair_dataset(CORPUS, 12, 7)
    with pytest.raises(ValueError, match="empty"):
        ct_pair_dataset([], 16, 7)


def test_loss_equals_closed_form_on_the_towers():
    enc = make_tiny_encoder()
    ct = ContrastiveTension(enc)
    batch = next(iter(ct_data(enc)))
    loss = float(ct.compute_loss_terms(batch, training=True).loss)

    def mean_pool(tower, inputs):
        h = tower.backbone(inputs)["sequence_output"].numpy()
        m = inputs["padding_mask"].numpy()[..., None]
        return (h * m).sum(1) / m.sum(1)

    r1, r2 = mean_pool(ct.tower1, batch["left"]), mean_pool(ct.tower2, batch["right"])
    z = (r1 * r2).sum(1)
    y = batch["labels"].numpy()
    expected = np.mean(np.maximum(z, 0) - z * y + np.log1p(np.exp(-np.abs(z))))
    assert loss == pytest.approx(expected, rel=1e-5)


def test_dropout_off_by_default_and_on_when_asked():
    enc = make_tiny_encoder()
    batch = next(iter(ct_data(enc)))
    ct = ContrastiveTension(enc)
    a = float(ct.compute_loss_terms(batch, training=True).loss)
    b = float(ct.compute_loss_terms(batch, training=True).loss)
    assert a == b
    ct_drop = ContrastiveTension(make_tiny_encoder(), dropout=True)
    c = float(ct_drop.compute_loss_terms(batch, training=True).loss)
    d = float(ct_drop.compute_loss_terms(batch, training=True).loss)
    assert c != d


def test_towers_start_equal_and_diverge():
    enc = make_tiny_encoder()
    ct = ContrastiveTension(enc)
    w1, w2 = ct.tower1.get_weights(), ct.tower2.get_weights()
    assert all(np.array_equal(a, b) for a, b in zip(w1, w2))
    ct.compile(optimizer=keras.optimizers.RMSprop(1e-3))
    ct.fit(ct_data(enc), steps_per_epoch=5, epochs=1, verbose=0)
    w1, w2 = ct.tower1.get_weights(), ct.tower2.get_weights()
    assert not all(np.allclose(a, b) for a, b in zip(w1, w2))
    assert int(ct.optimizer.iterations) == 5


def test_in_batch_variant_learns_a_clamped_scale():
    enc = make_tiny_encoder()
    ct = ContrastiveTension(enc, negatives="in_batch")
    log_scale = ct.logit_scale.log_scale
    assert float(log_scale) == pytest.approx(np.log(20.0))
    optimizer = keras.optimizers.AdamW(0.5, weight_decay=0.5)
    ct.compile(optimizer=optimizer)
    assert optimizer._use_weight_decay(log_scale) is False  # excluded from decay
    values = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            values.append(float(log_scale))

    ct.fit(ct_data(enc, k=0, batch=8), steps_per_epoch=6, epochs=1, verbose=0,
           callbacks=[Record()])
    # lr 0.5 moves the log scale by ~0.5 a step: it must hit a clamp, and stay in range.
    assert values[0] != pytest.approx(np.log(20.0))
    assert all(0.0 <= v <= np.log(100.0) + 1e-6 for v in values)
    assert min(values) == pytest.approx(0.0, abs=1e-6) or max(values) == pytest.approx(np.log(100.0))


def test_nonfinite_loss_stops_and_keeps_last_finite_weights():
    enc = make_tiny_encoder()

    class Exploding(ContrastiveTension):
        def compute_loss_terms(self, data, training=True):
            out = super().compute_loss_terms(data, training)
            return LossOutput(tf.where(self.optimizer.iterations >= 3, np.nan, out.loss))

    ct = Exploding(enc)
    ct.compile(optimizer=keras.optimizers.RMSprop(1e-3))
    snapshots = {}

    class Snap(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            snapshots[int(ct.optimizer.iterations)] = [np.array(w) for w in ct.tower1.get_weights()]

    from keras_sentemb.pipelines.callbacks import NonFiniteGuard

    guard = NonFiniteGuard()
    ct.fit(ct_data(enc), steps_per_epoch=10, epochs=1, verbose=0, callbacks=[Snap(), guard])
    assert guard.stopped_at == 4
    final = ct.tower1.get_weights()
    assert all(np.isfinite(w).all() for w in final)
    assert all(np.array_equal(a, b) for a, b in zip(final, snapshots[3]))


MIRRORED = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {repo!r})
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import numpy as np, keras
    from tests.conftest import make_tiny_encoder
    from tests.numeric import assert_moved_alike
    from keras_sentemb.methods.contrastive_tension.trainer import ContrastiveTension
    from keras_sentemb.data.ct_sampler import ct_pair_dataset
    from keras_sentemb.data.batching import tokenize_columns
    corpus = ["a man plays", "the cat sits on the mat", "hello world", "a dog runs in the park",
              "the woman plays piano", "a cat", "the man sits", "world"]
    def run(strategy, negatives, k):
        with strategy.scope():
            enc = make_tiny_encoder()
            ct = ContrastiveTension(enc, negatives=negatives)
            ct.compile(optimizer=keras.optimizers.SGD(0.1))
        ds = tokenize_columns(enc, ct_pair_dataset(corpus, 16, k, seed=0), ["left", "right"])
        start = ct.tower1.get_weights()
        h = ct.fit(ds, steps_per_epoch=2, epochs=1, verbose=0)
        return h.history["loss"][-1], ct.tower1.get_weights(), start
    negatives, k = sys.argv[1], int(sys.argv[2])
    l1, w1, start = run(tf.distribute.get_strategy(), negatives, k)
    l2, w2, _ = run(tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]), negatives, k)
    print(negatives, l1, l2)
    assert abs(l1 - l2) < 1e-4 * max(1, abs(l1)), (l1, l2)
    # SGD: the weights differ by the replicas' summation order of the gradients.
    assert_moved_alike(start, w1, w2, rtol=1e-4, min_moved=1e-4)
    print("OK")
    """
)


@pytest.mark.parametrize("negatives,k", [("k7", 7), ("in_batch", 0)])
def test_mirrored_strategy_matches_single_device(tmp_path, negatives, k):
    # One strategy per process: TF reuses collective instance keys across
    # MirroredStrategy objects in one process.
    script = tmp_path / "mirrored.py"
    script.write_text(MIRRORED.format(repo=str(REPO)))
    result = subprocess.run(
        [sys.executable, str(script), negatives, str(k)],
        capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert "OK" in result.stdout

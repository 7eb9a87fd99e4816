import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_sentemb
from keras_sentemb.data.batching import tokenize_columns
from keras_sentemb.data.ct_sampler import ct_pair_dataset
from keras_sentemb.trainers.callbacks import sts_spearman
from keras_sentemb.trainers.contrastive_tension import ContrastiveTension
from keras_sentemb.trainers.ct_schedule import CTLearningRateSchedule
from tests.conftest import REPO, make_tiny_encoder

WORDS = ["a", "the", "man", "woman", "dog", "cat", "plays", "guitar", "piano",
         "runs", "sits", "on", "mat", "park", "in", "hello", "world"]
RNG = np.random.default_rng(0)
CORPUS = [" ".join(RNG.choice(WORDS, size=RNG.integers(2, 9))) for _ in range(300)]
DEV = [(CORPUS[i], CORPUS[i + 1], float(i % 5)) for i in range(0, 40, 2)]


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


def test_learning_rate_schedule_steps():
    schedule = CTLearningRateSchedule()
    lr = lambda step: float(schedule(step - 1))  # noqa: E731  (steps count from 1)
    assert lr(1) == pytest.approx(1e-5)
    assert lr(500) == pytest.approx(1e-5)
    assert lr(501) == pytest.approx(8e-6)
    assert lr(1001) == pytest.approx(6e-6)
    assert lr(2000) == pytest.approx(4e-6)
    assert lr(2001) == pytest.approx(2e-6)
    assert lr(10**6) == pytest.approx(2e-6)


def test_loss_equals_closed_form_on_the_towers():
    enc = make_tiny_encoder()
    ct = ContrastiveTension(enc)
    batch = next(iter(ct_data(enc)))
    loss = float(ct.compute_contrastive_loss(batch, training=True))

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
    a = float(ct.compute_contrastive_loss(batch, training=True))
    b = float(ct.compute_contrastive_loss(batch, training=True))
    assert a == b
    ct_drop = ContrastiveTension(make_tiny_encoder(), dropout=True)
    c = float(ct_drop.compute_contrastive_loss(batch, training=True))
    d = float(ct_drop.compute_contrastive_loss(batch, training=True))
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
    assert float(ct.log_scale) == pytest.approx(np.log(20.0))
    ct.compile(optimizer=keras.optimizers.AdamW(0.5))
    ct.fit(ct_data(enc, k=0, batch=8), steps_per_epoch=6, epochs=1, verbose=0)
    value = float(ct.log_scale)
    assert value != pytest.approx(np.log(20.0)) and 0.0 <= value <= np.log(100.0) + 1e-6


def test_fit_ct_keeps_the_best_tower_on_dev(tmp_path):
    enc = make_tiny_encoder()
    initial = sts_spearman(enc, DEV)
    kept = keras_sentemb.fit_ct(
        CORPUS, model=enc, steps=6, eval_every=2, dev=DEV, batch_size=8,
        negatives="k3", learning_rate=1e-2, verbose=0, output=str(tmp_path / "out"),
    )
    history = [max(scores.values()) for _, scores in
               [(s, sc) for s, sc in _selector_history(kept)]]
    assert sts_spearman(kept, DEV) == pytest.approx(max(history), abs=1e-6)
    assert sts_spearman(kept, DEV) >= initial - 1e-6
    loaded = keras_sentemb.SentenceEncoder.from_preset(str(tmp_path / "out"))
    np.testing.assert_allclose(loaded.encode(CORPUS[:5]), kept.encode(CORPUS[:5]), atol=1e-5)


def _selector_history(kept):
    return kept._ct_selection.history


def test_fit_ct_keep_tower2_and_bad_arguments():
    enc = make_tiny_encoder()
    kept = keras_sentemb.fit_ct(CORPUS, model=enc, steps=2, dev=None, keep="tower2",
                                batch_size=8, negatives="k3", verbose=0)
    assert kept is not enc and kept.name.endswith("tower2")
    with pytest.raises(ValueError, match="negatives"):
        keras_sentemb.fit_ct(CORPUS, model=enc, negatives="k0", dev=None)
    with pytest.raises(ValueError, match="no non-empty sentence"):
        keras_sentemb.fit_ct(["", "  "], model=enc, dev=None)
    with pytest.raises(ValueError, match="keep"):
        keras_sentemb.fit_ct(CORPUS, model=enc, keep="tower3")


def test_nonfinite_loss_stops_and_keeps_last_finite_weights():
    enc = make_tiny_encoder()

    class Exploding(ContrastiveTension):
        def compute_contrastive_loss(self, data, training=True):
            loss = super().compute_contrastive_loss(data, training)
            return tf.where(self.optimizer.iterations >= 3, np.nan, loss)

    ct = Exploding(enc)
    ct.compile(optimizer=keras.optimizers.RMSprop(1e-3))
    snapshots = {}

    class Snap(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            snapshots[int(ct.optimizer.iterations)] = [np.array(w) for w in ct.tower1.get_weights()]

    from keras_sentemb.trainers.callbacks import NonFiniteGuard

    guard = NonFiniteGuard()
    ct.fit(ct_data(enc), steps_per_epoch=10, epochs=1, verbose=0, callbacks=[Snap(), guard])
    assert guard.stopped_at == 4
    final = ct.tower1.get_weights()
    assert all(np.isfinite(w).all() for w in final)
    assert all(np.array_equal(a, b) for a, b in zip(final, snapshots[3]))


def test_backup_and_restore_continues_step_count_and_schedule(tmp_path):
    enc = make_tiny_encoder()
    ct = ContrastiveTension(enc)
    ct.compile()
    # fit_ct trains in epochs of `eval_every` steps; backups are per epoch.
    backup = keras.callbacks.BackupAndRestore(str(tmp_path / "backup"), save_freq="epoch")

    class Interrupt(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if int(self.model.optimizer.iterations) == 5:
                raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError, match="interrupted"):
        ct.fit(ct_data(enc), steps_per_epoch=4, epochs=2, verbose=0, callbacks=[backup, Interrupt()])
    fresh = ContrastiveTension(make_tiny_encoder())
    fresh.compile()
    steps_seen = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            steps_seen.append(int(self.model.optimizer.iterations))

    fresh.fit(ct_data(enc), steps_per_epoch=4, epochs=2, verbose=0, callbacks=[backup, Record()])
    assert steps_seen == [4, 5, 6, 7]  # resumed after the step-4 backup, not from 0
    assert int(fresh.optimizer.iterations) == 8
    schedule = fresh.optimizer._learning_rate  # `.learning_rate` is the current value
    assert isinstance(schedule, CTLearningRateSchedule)
    assert float(fresh.optimizer.learning_rate) == pytest.approx(float(schedule(8)))
    restored = fresh.tower1.get_weights()
    assert not all(np.array_equal(a, b) for a, b in zip(restored, make_tiny_encoder().get_weights()))


def test_cli_train_ct(tmp_path):
    from keras_sentemb.cli import main

    enc = make_tiny_encoder()
    enc.save(tmp_path / "tiny")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(CORPUS), encoding="utf-8")
    rc = main(["train", "ct", "--model", str(tmp_path / "tiny"), "--train-file", str(corpus),
               "--output", str(tmp_path / "out"), "--steps", "3", "--batch-size", "8",
               "--negatives", "k3", "--dev", "none", "--verbose", "0"])
    assert rc == 0
    assert (tmp_path / "out" / "sentemb_config.json").is_file()
    assert main(["train", "ct", "--model", str(tmp_path / "tiny"), "--train-file", str(corpus),
                 "--output", str(tmp_path / "o2"), "--no-such-flag", "1"]) == 2


MIRRORED = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {repo!r})
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import numpy as np, keras
    from tests.conftest import make_tiny_encoder
    from keras_sentemb.trainers.contrastive_tension import ContrastiveTension
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
        h = ct.fit(ds, steps_per_epoch=2, epochs=1, verbose=0)
        return h.history["loss"][-1], ct.tower1.get_weights()[0]
    negatives, k = sys.argv[1], int(sys.argv[2])
    l1, w1 = run(tf.distribute.get_strategy(), negatives, k)
    l2, w2 = run(tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]), negatives, k)
    print(negatives, l1, l2, float(np.abs(w1 - w2).max()))
    assert abs(l1 - l2) < 1e-4 * max(1, abs(l1)), (l1, l2)
    assert np.allclose(w1, w2, atol=1e-5)
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

"""Static-shape training: one trace per run, one XLA compilation per bucket, flat memory."""

import os
import subprocess
import sys
import textwrap

import keras
import pytest

from keras_sentemb.data.batching import shuffled_batches
from keras_sentemb.data.batching import tokenize_columns
from keras_sentemb.methods.simcse.trainer import SimCSE
from tests.conftest import REPO, make_tiny_encoder
from tests.helpers.corpora import UNEVEN_CORPUS as CORPUS


class CountingSimCSE(SimCSE):
    """SimCSE that records every Python trace of its train_step."""

    traces = []

    def train_step(self, data):
        CountingSimCSE.traces.append(tuple(data["sentence"]["token_ids"].shape))
        return super().train_step(data)


def test_train_step_is_traced_once_for_every_bucket():
    enc = make_tiny_encoder()
    ds = tokenize_columns(enc, shuffled_batches({"sentence": CORPUS}, 4, seed=0),
                          ["sentence"], max_length=20)
    widths = {b["sentence"]["token_ids"].shape[1] for b in ds.take(20)}
    assert len(widths) >= 2  # the run below meets several bucket widths
    CountingSimCSE.traces = []
    trainer = CountingSimCSE(enc, pooling="mean", mlp="none")
    trainer.compile(optimizer=keras.optimizers.SGD(0.01))
    trainer.fit(ds, steps_per_epoch=10, epochs=2, verbose=0)
    assert CountingSimCSE.traces == [(4, None)]


XLA = textwrap.dedent(
    """
    import glob, os, sys
    os.environ["XLA_FLAGS"] = "--xla_dump_to=" + sys.argv[1]
    sys.path.insert(0, {repo!r})
    import keras
    from tests.conftest import make_tiny_encoder
    from tests.helpers.corpora import UNEVEN_CORPUS as CORPUS
    from keras_sentemb.data.batching import shuffled_batches, tokenize_columns
    from keras_sentemb.methods.simcse.trainer import SimCSE

    def compiled():
        pattern = os.path.join(sys.argv[1], "*one_step_on_data*before_optimizations.txt")
        return len(glob.glob(pattern))

    # Buckets: 12 batches meet every bucket width. Raw lengths: 10 batches are enough to meet
    # more widths than the buckets have, each one compiled (every compilation costs seconds).
    for mode, steps in (("buckets", 6), ("raw", 5)):
        enc = make_tiny_encoder(num_layers=1)
        ds = tokenize_columns(enc, shuffled_batches({{"sentence": CORPUS}}, 4, seed=0),
                              ["sentence"], max_length=20, buckets=mode == "buckets")
        widths = {{b["sentence"]["token_ids"].shape[1] for b in ds.take(2 * steps)}}
        before = compiled()
        trainer = SimCSE(enc, pooling="mean", mlp="none")
        trainer.compile(optimizer=keras.optimizers.SGD(0.01), jit_compile=True)
        trainer.fit(ds, steps_per_epoch=steps, epochs=2, verbose=0)
        print(mode, len(widths), compiled() - before)
    """
)


def test_xla_compiles_once_per_bucket_and_once_per_length_without_buckets(tmp_path):
    script = tmp_path / "xla_count.py"
    script.write_text(XLA.format(repo=str(REPO)))
    result = subprocess.run([sys.executable, str(script), str(tmp_path / "dump")],
                            capture_output=True, text=True, timeout=600, cwd=str(REPO))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    counts = {}
    for line in result.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] in ("buckets", "raw"):
            counts[parts[0]] = (int(parts[1]), int(parts[2]))
    widths, compiled = counts["buckets"]
    assert compiled == widths <= 3  # 8, 16, 20: never a compilation per batch
    raw_widths, raw_compiled = counts["raw"]
    assert raw_compiled == raw_widths > widths  # what the buckets save


def rss_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux /proc")
def test_memory_stays_flat_over_a_long_run():
    enc = make_tiny_encoder()
    ds = tokenize_columns(enc, shuffled_batches({"sentence": CORPUS}, 4, seed=0),
                          ["sentence"], max_length=20)
    trainer = SimCSE(enc, pooling="mean", mlp="none")
    trainer.compile(optimizer=keras.optimizers.AdamW(1e-3))
    samples = []

    class Sample(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            samples.append(rss_mib())

    trainer.fit(ds, steps_per_epoch=60, epochs=6, verbose=0, callbacks=[Sample()])
    # After the first epochs (tracing, allocator warm-up) 240 more steps add
    # no memory beyond allocator noise.
    assert max(samples[2:]) - samples[1] < 32, samples

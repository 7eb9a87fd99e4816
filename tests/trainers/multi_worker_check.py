"""One worker of a two-process MultiWorkerMirroredStrategy check; run as a script.

`tests/trainers/test_multi_worker.py` starts this file twice, with TF_CONFIG
describing a two-worker cluster on localhost (one CPU replica per worker), and
once with `--single` for the single-device reference on the global batch. Each
run writes a JSON file: per-step `nonfinite` logs, the starting and the trained weights.

Cases:
- `quadratic`: `tests.helpers.training.Quadratic` on data whose
  second global batch has a NaN in one worker's shard only.
- `ct_in_batch`: Contrastive Tension with in-batch negatives on a tiny BERT;
  candidates are gathered across the workers.
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

case, out = sys.argv[1], sys.argv[2]
single = "--single" in sys.argv
if not single:
    index, ports = int(sys.argv[3]), sys.argv[4].split(",")
    os.environ["TF_CONFIG"] = json.dumps({
        "cluster": {"worker": [f"localhost:{p}" for p in ports]},
        "task": {"type": "worker", "index": index},
    })

import keras  # noqa: E402
keras.config.disable_traceback_filtering()
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

strategy = (
    tf.distribute.get_strategy() if single else tf.distribute.MultiWorkerMirroredStrategy()
)
assert single or strategy.num_replicas_in_sync == 2

with strategy.scope():
    if case == "quadratic":
        from tests.helpers.training import QUADRATIC_DATA as DATA, Quadratic

        trainer = Quadratic()
        trainer.compile(optimizer=keras.optimizers.AdamW(1e-2, weight_decay=0.1))
        dataset, steps = tf.data.Dataset.from_tensor_slices(DATA).batch(4), 3
        weights = lambda: [np.asarray(trainer.encoder.kernel)]  # noqa: E731
    else:
        from keras_sentemb.data.batching import tokenize_columns
        from keras_sentemb.data.ct_sampler import ct_pair_dataset
        from keras_sentemb.methods.contrastive_tension.trainer import ContrastiveTension
        from tests.conftest import make_tiny_encoder
        from tests.helpers.corpora import CORPUS

        encoder = make_tiny_encoder()
        trainer = ContrastiveTension(encoder, negatives="in_batch")
        trainer.compile(optimizer=keras.optimizers.SGD(0.1))
        dataset = tokenize_columns(encoder, ct_pair_dataset(CORPUS, 16, 0, seed=0), ["left", "right"])
        steps = 3
        weights = lambda: [np.asarray(w) for w in trainer.tower1.get_weights()]  # noqa: E731

options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
dataset = dataset.with_options(options)

logs_seen = []


class Record(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        logs_seen.append({k: float(np.asarray(v).reshape(())) for k, v in logs.items()})


start = [w.tolist() for w in weights()]
trainer.fit(dataset, epochs=1, steps_per_epoch=steps, verbose=0, callbacks=[Record()])
with open(out, "w") as f:
    json.dump({"logs": logs_seen, "start": start, "weights": [w.tolist() for w in weights()]}, f)
print("done")

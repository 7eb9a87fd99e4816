"""One worker of a two-process check of streamed data under MultiWorkerMirroredStrategy.

`tests/data/test_multi_worker_streams.py` starts this file twice with a
TF_CONFIG describing a two-worker cluster on localhost. Each worker:

- distributes the stream of a 4-file corpus (`FOLDER/part-*.txt`) with the
  strategy, as Keras `fit` does, and records the texts of its share of each
  of the first `STEPS` global batches;
- trains `fit_ct` (in-batch negatives) and `fit_simcse` (whose optimizer is made
  outside the strategy scope and made again inside) on the same glob for 2 steps
  under the strategy.

It writes a JSON file: the texts per step, the shard policy, the steps
trained.
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

folder, out, index, ports = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4].split(",")
steps, batch = int(sys.argv[5]), int(sys.argv[6])
os.environ["TF_CONFIG"] = json.dumps({
    "cluster": {"worker": [f"localhost:{p}" for p in ports]},
    "task": {"type": "worker", "index": index},
})

import tensorflow as tf  # noqa: E402

import keras_sentemb  # noqa: E402
from keras_sentemb.data import stream_batches as sb  # noqa: E402
from tests.conftest import make_tiny_encoder  # noqa: E402

strategy = tf.distribute.MultiWorkerMirroredStrategy()
assert strategy.num_replicas_in_sync == 2
workers = sb.worker_shard(strategy)
glob = os.path.join(folder, "part-*.txt")
source = keras_sentemb.streamed(glob, shuffle_buffer=16)
dataset = sb.stream_batches(source, ("sentence",), batch, seed=1, no_duplicates=True,
                            workers=workers)
policy = sb.shard_policy(source, workers[0])
shares = []
for step, element in enumerate(strategy.experimental_distribute_dataset(dataset)):
    if step == steps:
        break
    local = strategy.experimental_local_results(element["sentence"])
    shares.append([t.decode() for part in local for t in part.numpy()])

with strategy.scope():
    encoder = make_tiny_encoder()
trained = keras_sentemb.fit_ct(glob, model=encoder, steps=2, batch_size=batch, dev=None,
                               negatives="in_batch", keep="tower2", strategy=strategy, verbose=0)
with strategy.scope():
    encoder = make_tiny_encoder()
simcse = keras_sentemb.fit_simcse(glob, model=encoder, steps=2, batch_size=batch, dev=None,
                                  strategy=strategy, verbose=0)
with open(out, "w") as f:
    json.dump({"shares": shares, "workers": workers[0], "policy": int(policy),
               "steps_trained": trained.training_report.steps_trained,
               "simcse_steps_trained": simcse.training_report.steps_trained}, f)
print("done")

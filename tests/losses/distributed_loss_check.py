"""Distributed parity checks for the losses; run as a script in a fresh process.

`tests/losses/test_loss_distributed.py` runs this file with
`subprocess.run([sys.executable, __file__])` because two logical CPU devices
can only be configured before TensorFlow initializes its devices. It prints
one JSON object mapping check names to results (max absolute differences and
reference magnitudes) on its last stdout line.

A tiny linear "encoder" (embeddings = inputs @ W, W a shared variable) makes
the gradients flow through the cross-replica gather into W.
"""

import json
import math
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

_cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    _cpu, [tf.config.LogicalDeviceConfiguration()] * 2
)

import keras  # noqa: E402

from keras_sentemb.losses import contrastive_tension_in_batch_loss  # noqa: E402
from keras_sentemb.losses import contrastive_tension_loss  # noqa: E402
from keras_sentemb.losses import info_nce_loss  # noqa: E402
from keras_sentemb.losses import nt_xent_loss  # noqa: E402
from keras_sentemb.losses import scale_loss_for_replicas  # noqa: E402

GLOBAL_BATCH = 6
IN_DIM = 5
OUT_DIM = 4

RNG = np.random.default_rng(1234)
INPUTS = {
    name: RNG.normal(size=[GLOBAL_BATCH, IN_DIM]).astype(np.float32)
    for name in ("a", "p", "n")
}
INPUTS["labels"] = np.array([1, 0, 0, 1, 0, 0], np.float32)
W0 = (0.5 * RNG.normal(size=[IN_DIM, OUT_DIM])).astype(np.float32)

CASES = {
    "info_nce": lambda a, p, n, y, **kw: info_nce_loss(a, p, **kw),
    "info_nce_hard_negatives": lambda a, p, n, y, **kw: info_nce_loss(
        a, p, n, temperature=0.1, hard_negative_weight=0.5, **kw
    ),
    "info_nce_symmetric_dot": lambda a, p, n, y, **kw: info_nce_loss(
        a, p, n, temperature=2.0, similarity="dot", symmetric=True, **kw
    ),
    "nt_xent": lambda a, p, n, y, **kw: nt_xent_loss(a, p, temperature=0.2, **kw),
    "ct_in_batch": lambda a, p, n, y, **kw: contrastive_tension_in_batch_loss(
        a, p, logit_scale=math.log(5.0), **kw
    ),
    "ct_k_negatives": lambda a, p, n, y, **kw: contrastive_tension_loss(
        a, p, y, **kw
    ),
}


def _max_diff(x, y):
    return float(np.max(np.abs(np.asarray(x) - np.asarray(y))))


def single_device(fn, reduction="mean"):
    w = tf.Variable(W0)
    with tf.GradientTape() as tape:
        embed = {k: tf.constant(INPUTS[k]) @ w for k in ("a", "p", "n")}
        loss = fn(
            embed["a"], embed["p"], embed["n"], INPUTS["labels"], reduction=reduction
        )
    return loss.numpy(), tape.gradient(loss, w).numpy()


def distributed(strategy, fn, splits, reduction="mean", scale=True):
    """Per-replica loss and gradient, reduced as the trainers do."""
    with strategy.scope():
        w = tf.Variable(W0)
    bounds = np.cumsum([0] + list(splits))

    def shard(ctx):
        r = ctx.replica_id_in_sync_group
        return {k: tf.constant(v[bounds[r]:bounds[r + 1]]) for k, v in INPUTS.items()}

    inputs = strategy.experimental_distribute_values_from_function(shard)

    def replica_fn(x):
        with tf.GradientTape() as tape:
            embed = {k: x[k] @ w for k in ("a", "p", "n")}
            loss = fn(embed["a"], embed["p"], embed["n"], x["labels"], reduction=reduction)
            to_differentiate = scale_loss_for_replicas(loss) if scale else loss
        return loss, tape.gradient(to_differentiate, w)

    @tf.function
    def step(x):
        loss, grad = strategy.run(replica_fn, args=(x,))
        reduce_op = (
            tf.distribute.ReduceOp.MEAN if reduction == "mean" else tf.distribute.ReduceOp.SUM
        )
        return (
            strategy.reduce(reduce_op, loss, axis=None),
            strategy.reduce(tf.distribute.ReduceOp.SUM, grad, axis=None),
        )

    loss, grad = step(inputs)
    return loss.numpy(), grad.numpy()


def keras_fit_one_step(strategy, jit_compile):
    """One SGD(lr=1) step of a Keras model whose train_step follows the convention."""

    class TinyInfoNCE(keras.Model):
        def __init__(self):
            super().__init__()
            self.encoder = keras.layers.Dense(
                OUT_DIM,
                use_bias=False,
                kernel_initializer=keras.initializers.Constant(W0),
            )
            self.encoder.build((None, IN_DIM))

        def call(self, x):
            return {k: self.encoder(v) for k, v in x.items()}

        def train_step(self, data):
            with tf.GradientTape() as tape:
                emb = self(data, training=True)
                loss = info_nce_loss(
                    emb["a"],
                    emb["p"],
                    emb["n"],
                    temperature=0.1,
                    hard_negative_weight=0.5,
                )
                scaled = self.optimizer.scale_loss(scale_loss_for_replicas(loss))
            grads = tape.gradient(scaled, self.trainable_weights)
            self.optimizer.apply_gradients(zip(grads, self.trainable_weights))
            return {"loss": loss}

    with strategy.scope():
        model = TinyInfoNCE()
        model.compile(optimizer=keras.optimizers.SGD(learning_rate=1.0), jit_compile=jit_compile)
    data = tf.data.Dataset.from_tensor_slices(
        {k: INPUTS[k] for k in ("a", "p", "n")}
    ).batch(GLOBAL_BATCH)
    model.fit(data, epochs=1, verbose=0)
    return model.encoder.kernel.numpy(), model.jit_compile


def main():
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    assert strategy.num_replicas_in_sync == 2
    results = {}
    for name, fn in CASES.items():
        want_loss, want_grad = single_device(fn)
        got_loss, got_grad = distributed(strategy, fn, splits=(3, 3))
        results[f"even/{name}"] = {
            "loss_diff": abs(float(got_loss) - float(want_loss)),
            "loss": float(want_loss),
            "grad_diff": _max_diff(got_grad, want_grad),
            "grad_scale": float(np.max(np.abs(want_grad))),
        }
        # Uneven shards (4 + 2): with `reduction="sum"` and no scaling, the
        # summed losses and gradients must equal the single-device sum. This
        # checks the gathered candidates and label offsets for unequal shards.
        want_loss, want_grad = single_device(fn, reduction="sum")
        got_loss, got_grad = distributed(
            strategy, fn, splits=(4, 2), reduction="sum", scale=False
        )
        results[f"uneven_sum/{name}"] = {
            "loss_diff": abs(float(got_loss) - float(want_loss)),
            "loss": float(want_loss),
            "grad_diff": _max_diff(got_grad, want_grad),
            "grad_scale": float(np.max(np.abs(want_grad))),
        }

    # Controls: the checks above must be able to fail. Without the division
    # by the number of replicas the gradient doubles; without the gather each
    # replica only sees its own shard of candidates.
    fn = CASES["info_nce_hard_negatives"]
    want_loss, want_grad = single_device(fn)
    _, got_grad = distributed(strategy, fn, splits=(3, 3), scale=False)
    results["control/unscaled"] = {
        "grad_diff": _max_diff(got_grad, want_grad),
        "grad_scale": float(np.max(np.abs(want_grad))),
    }
    got_loss, _ = distributed(
        strategy, lambda *args, **kw: fn(*args, gather=False, **kw), splits=(3, 3)
    )
    results["control/no_gather"] = {
        "loss_diff": abs(float(got_loss) - float(want_loss)),
        "loss": float(want_loss),
    }

    # The trainer usage, end to end through Keras' fit and optimizer.
    hard = CASES["info_nce_hard_negatives"]
    _, want_grad = single_device(hard)
    want_kernel = W0 - want_grad
    for jit_compile in (False, "auto"):
        try:
            kernel, effective_jit = keras_fit_one_step(strategy, jit_compile)
            results[f"keras_fit/jit_compile={jit_compile}"] = {
                "kernel_diff": _max_diff(kernel, want_kernel),
                "effective_jit_compile": bool(effective_jit),
                "grad_scale": float(np.max(np.abs(want_grad))),
            }
        except Exception as e:  # Reported, and asserted on by the test.
            results[f"keras_fit/jit_compile={jit_compile}"] = {
                "error": f"{type(e).__name__}: {e}"[:2000]
            }
    print(json.dumps(results))


if __name__ == "__main__":
    sys.exit(main())

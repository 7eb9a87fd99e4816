"""`BaseTrainer`: the Keras train_step template shared by every method."""

import keras
import tensorflow as tf

from keras_sentemb import compat
from keras_sentemb import validation
from keras_sentemb.losses.distributed import all_replicas_agree
from keras_sentemb.losses.matryoshka import MatryoshkaLoss
from keras_sentemb.models.logit_scale import LogitScale
from keras_sentemb.trainers.optimizers import get

# Counter values reserved per step for each SeedGenerator (draws within a step).
SEED_STRIDE = 1 << 20
# Within a step, counter values reserved per GradCache chunk: a chunk's
# forward pass draws from `step * SEED_STRIDE + (chunk + 1) * CHUNK_STRIDE`
# on, in the pass without gradients and again in the pass with them.
CHUNK_STRIDE = 1 << 10
MAX_CHUNKS = SEED_STRIDE // CHUNK_STRIDE - 1


def dense_gradients(grads):
    """Embedding gradients (`tf.IndexedSlices`) as dense tensors; others unchanged.

    A token embedding's gradient holds one row per occurrence of a token in
    the batch. Keras 3's Adam and RMSprop square such a gradient slice by
    slice (`ops.square` is applied before duplicate rows are summed), so a
    token that occurs k times gets `sum(g_i^2)` instead of `(sum g_i)^2` in
    its second moment: up to sqrt(k) times larger steps for [CLS], [SEP] and
    frequent words. Dense gradients give the usual update (PyTorch's, whose
    embedding gradients are dense; the papers' code), under every strategy
    (an all-reduce of dense gradients sums rows; of sparse ones it would
    concatenate them again). The optimizers update every row of their
    moments anyway.
    """
    return [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]


def apply_if_finite(optimizer, grads_and_vars, finite):
    """`optimizer.apply_gradients(grads_and_vars)` if `finite`, else skip the update.

    A skipped step leaves the weights *and* the optimizer state (Adam's
    moments, weight decay) untouched and only advances `optimizer.iterations`,
    so the step count and learning-rate schedule stay aligned with the data.
    Zeroed gradients would not do: with momentum or decoupled weight decay a
    zero gradient still moves the weights.

    `finite` must be the same on every replica (see
    `keras_sentemb.losses.distributed.all_replicas_agree`). Under a strategy
    that synchronises through `merge_call` (MirroredStrategy) an optimizer
    update cannot run inside replica-context control flow, so the condition
    is evaluated in the cross-replica context and the update re-entered per
    replica, as Keras' `LossScaleOptimizer` does.

    Sparse gradients are made dense first (`dense_gradients`).

    Args:
        optimizer: a built Keras optimizer.
        grads_and_vars: list of `(gradient, variable)` pairs.
        finite: boolean scalar tensor.
    """
    grads, variables = zip(*grads_and_vars) if grads_and_vars else ((), ())
    grads_and_vars = list(zip(dense_gradients(grads), variables))

    def apply(pairs):
        optimizer.apply_gradients(pairs)

    def skip():
        optimizer.iterations.assign_add(1)

    ctx = tf.distribute.get_replica_context()
    if (
        ctx is not None
        and ctx.num_replicas_in_sync > 1
        and not compat.strategy_supports_no_merge_call()
    ):

        def merged(distribution, pairs, finite):
            first = distribution.experimental_local_results(finite)[0]
            tf.cond(
                first,
                lambda: distribution.extended.call_for_each_replica(apply, args=(pairs,)),
                skip,
            )

        ctx.merge_call(merged, args=(grads_and_vars, finite))
    else:
        tf.cond(finite, lambda: apply(grads_and_vars), skip)


def all_finite(loss, grads, loss_scaled):
    """Whether the loss and (without loss scaling) every gradient are finite."""
    finite = tf.math.is_finite(loss)
    if not loss_scaled:
        # With mixed precision an overflow of the scaled gradients is
        # routine: the LossScaleOptimizer skips that step and lowers its
        # scale, so only a non-finite loss counts there.
        for g in grads:
            if g is not None:
                # An embedding's gradient is IndexedSlices: check its rows
                # (converting it would build a dense vocabulary-sized tensor).
                values = g.values if isinstance(g, tf.IndexedSlices) else g
                finite = tf.logical_and(finite, tf.reduce_all(tf.math.is_finite(values)))
    return all_replicas_agree(finite)  # one replica's NaN skips the step everywhere


class BaseTrainer(keras.Model):
    """Base class of the method trainers: loss in, guarded update out.

    Subclasses implement `compute_contrastive_loss(data, training)`, which
    returns the float32 loss of this replica's examples (averaged over
    them), or `(loss, metrics)` with a dict of extra scalar metrics, or
    `(loss, metrics, aux)` where `aux` is handed to `after_update(aux,
    finite)` once the weights are updated (the parallel trainer enqueues
    its keys there). `train_step` follows Keras' TensorFlow template:
    compute the loss, `optimizer.scale_loss`, gradients, apply, update
    metrics. Under a `tf.distribute` strategy the per-replica loss is
    divided by the number of replicas before the gradients are taken,
    because the optimizer sums gradients across replicas; the in-batch
    losses gather candidates across replicas (see
    `keras_sentemb.losses.distributed`), so the result equals one device
    with the global batch.

    A step whose loss or gradients are not finite (with a
    `LossScaleOptimizer`: whose loss is not finite; it handles gradient
    overflow itself) is skipped (`apply_if_finite`: weights and optimizer
    state stay the last finite ones, only the step count advances) and
    reports `nonfinite = 1`; the `NonFiniteGuard` callback then stops
    training. Under a strategy the replicas agree first, so a NaN in one
    replica's shard skips the step on all of them.

    `candidates()` names the encoders a dev selection may choose among
    (CT: both towers) and `select(name)` makes one of them the kept
    `encoder`. A trainer's `logit_scale` (a `LogitScale`) is excluded from
    weight decay at `compile`.

    Trainers are registered Keras objects: `get_config()` returns every
    constructor argument, the encoders serialized, and `from_config`
    rebuilds them.

    **GradCache** (`mini_batch_size`). A trainer whose loss is split into
    `embed_batch(data, training)` (per-row embeddings, a nest of `[b, ...]`
    tensors) and `loss_from_embeddings(embeddings, data, training)` can
    train a batch of any size in the memory of `mini_batch_size` rows
    (Gao et al., 2021): (1) embed the batch in chunks of `mini_batch_size`
    rows without gradients; (2) compute the loss of the whole batch and
    its gradient with respect to the embeddings (and to the loss's own
    weights, such as a learnable logit scale); (3) embed each chunk again
    with gradients and accumulate the vector-Jacobian products
    `d(sum(embeddings * cached_gradient)) / d(weights)`. Each chunk's
    random draws (dropout masks, view masks) are replayed exactly: its
    `SeedGenerator` counters are set to the same `(step, chunk)` values in
    both passes, so the update equals the full-batch gradient through the
    same masks. The chunks run one after the other (`tf.while_loop`,
    `parallel_iterations=1`), so only one chunk's activations live at a
    time. Every entry of a batch must have one row per example (a last
    partial chunk is filled with repeated rows whose gradient is zero).

    An encoder with a post-processing layer (whitening, a flow) is refused:
    those are fitted on the frozen encoder's vectors.

    Args:
        encoder: `SentenceEncoder`. The encoder kept for use after training.
        mini_batch_size: int or None. Rows embedded at once with GradCache;
            `None` embeds the whole batch at once (no GradCache). Defaults
            to `None`.

    References:
        - [Gao, Zhang, Han & Callan, 2021. Scaling Deep Contrastive Learning
          Batch Size under Memory Limited Setup](https://arxiv.org/abs/2101.06983)
    """
    # Constructor arguments holding a SentenceEncoder (serialized in get_config).
    encoder_arguments = ("encoder",)

    def __init__(self, encoder, mini_batch_size=None, **kwargs):
        layer = getattr(encoder, "postprocess", None)
        if layer is not None:
            raise ValueError(
                f"The encoder has a post-processing layer ({type(layer).__name__}, fitted on "
                "its frozen vectors); training the encoder would invalidate it. Train the "
                "encoder without it (encoder.postprocess = None, or the model it was fitted "
                "on) and fit the post-processing again afterwards."
            )
        super().__init__(**kwargs)
        self.encoder = encoder
        self.mini_batch_size = validation.optional_positive_int(
            mini_batch_size, "mini_batch_size"
        )
        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.nonfinite_tracker = keras.metrics.Sum(name="nonfinite")
        object.__setattr__(self, "_seed_states", None)
        object.__setattr__(self, "matryoshka", None)
        self.built = True

    def compile(self, optimizer="rmsprop", **kwargs):
        """Keras `compile`, with `jit_compile=False` and the optimizer built now.

        An optimizer given by name is this toolkit's fused form where there is
        one (`keras_sentemb.trainers.optimizers.get`: `"rmsprop"`, `"adam"`,
        `"adamw"`).

        Dynamic shapes (every batch is padded to its own length) make XLA
        recompile per shape, so it is off by default. `no_decay_variables()`
        (the learnable logit scale) are excluded from weight decay. The optimizer's slots are created here,
        outside any replica context: built lazily inside the first replica's
        trace under `MirroredStrategy`, they shift the order in which the
        replicas create collectives and the all-gathers of in-batch losses
        then meet mismatched all-reduces.
        """
        kwargs.setdefault("jit_compile", False)
        if self.mini_batch_size is not None:
            reason = self.grad_cache_unsupported()
            if reason:
                raise ValueError(
                    f"mini_batch_size (GradCache) is not available here: {reason}. "
                    f"Received: mini_batch_size={self.mini_batch_size}."
                )
        if isinstance(optimizer, str):  # RMSprop / Adam / AdamW: their fused forms

            optimizer = get(optimizer)
        super().compile(optimizer=optimizer, **kwargs)
        optimizer = self.optimizer
        no_decay = self.no_decay_variables()
        if no_decay and hasattr(optimizer, "exclude_from_weight_decay") and not optimizer.built:
            optimizer.exclude_from_weight_decay(var_list=no_decay)
        if optimizer is not None and not optimizer.built:
            optimizer.build(self.trainable_variables)

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        """Skip Keras' symbolic build from a first, cross-replica-reduced batch.

        Under a strategy Keras 3 takes the first distributed batch, reduces it
        with `strategy.reduce("MEAN", ...)` and traces the model on it. A
        trainer needs none of that (its weights exist from `__init__`, its
        optimizer is built in `compile`, it has no compiled loss or metrics),
        and the reduction fails on nested dict batches under
        `MultiWorkerMirroredStrategy`. (Overrides a private Keras method; see
        `keras_sentemb.compat`.)
        """
        if self.optimizer is not None and not self.optimizer.built:
            with self.distribute_strategy.scope():
                self.optimizer.build(self.trainable_variables)

    # ------------------------------------------------- subclasses override
    def compute_contrastive_loss(self, data, training=True):
        """The loss of a batch: `loss_from_embeddings(embed_batch(data))`.

        Trainers override either this or the two halves; GradCache needs
        the halves.
        """
        if not self._splits_loss():
            raise NotImplementedError(
                f"{type(self).__name__} implements neither compute_contrastive_loss nor "
                "embed_batch / loss_from_embeddings."
            )
        return self.embeddings_loss(self.embed_batch(data, training), data, training)

    def embeddings_loss(self, embeddings, data, training=True):
        """`loss_from_embeddings`, over nested prefixes when `set_matryoshka` was called."""
        if self.matryoshka is not None:
            return self.matryoshka(embeddings, data, training)
        return self.loss_from_embeddings(embeddings, data, training)

    def set_matryoshka(self, dims, weights=None):
        """Train with the method's loss summed over the first `d` dimensions, `d` in `dims`.

        Wraps `loss_from_embeddings` in a `MatryoshkaLoss` (see
        `keras_sentemb.losses.matryoshka`); `None` turns it off.

        Args:
            dims: sequence of int or None. Prefix sizes, each at most the
                encoder's `output_dim`.
            weights: sequence of float or None. One weight per size.
                Defaults to 1 each.
        """
        if dims is None:
            object.__setattr__(self, "matryoshka", None)
            return
        reason = self.matryoshka_unsupported()
        if reason:
            raise ValueError(f"matryoshka_dims is not available here: {reason}.")
        loss = MatryoshkaLoss(self.matryoshka_base_loss(), dims, weights,
                              full_dim=self.encoder.output_dim)
        object.__setattr__(self, "matryoshka", loss)

    def matryoshka_base_loss(self):
        """The loss a Matryoshka loss wraps: `loss_from_embeddings`."""
        return self.loss_from_embeddings

    def matryoshka_unsupported(self):
        """Why a Matryoshka loss cannot wrap this trainer's loss, or None."""
        if not self._splits_loss():
            return f"{type(self).__name__} does not compute its loss from sentence embeddings"
        for name in ("mlp", "target_mlp", "source_mlp"):
            if getattr(self, name, None) is not None:
                return (f"the loss compares the training-only projection head's outputs, not the "
                        f"encoder's vectors; train with mlp='none'")
        return None

    def embed_batch(self, data, training=True):
        """Per-row embeddings of a batch: a nest of float32 `[b, ...]` tensors.

        Everything that depends on one example at a time (encoders, views,
        projection heads) happens here; nothing may mix rows.
        """
        raise NotImplementedError

    def loss_from_embeddings(self, embeddings, data, training=True):
        """The loss (or `(loss, metrics[, aux])`) of `embed_batch`'s output."""
        raise NotImplementedError

    def _splits_loss(self):
        cls = type(self)
        return (
            cls.embed_batch is not BaseTrainer.embed_batch
            and cls.loss_from_embeddings is not BaseTrainer.loss_from_embeddings
        )

    def grad_cache_unsupported(self):
        """Why `mini_batch_size` cannot be used with this trainer, or None."""
        if not self._splits_loss():
            return (
                f"{type(self).__name__} does not split its loss into embed_batch / "
                "loss_from_embeddings"
            )
        return None

    def after_update(self, aux, finite):
        """Called after the (possibly skipped) update with the loss's `aux`."""

    def no_decay_variables(self):
        """Variables kept out of weight decay: the `logit_scale`, if any."""
        scale = getattr(self, "logit_scale", None)
        return [scale.log_scale] if isinstance(scale, LogitScale) else []

    def candidates(self):
        """Encoders that dev selection may choose among (name -> encoder)."""
        return {"encoder": self.encoder}

    def select(self, name):
        """Make candidate `name` the kept `encoder` (after dev selection)."""
        self.encoder = self.candidates()[name]

    def extra_metrics(self):
        return []

    # ---------------------------------------------------------------- steps
    @property
    def metrics(self):
        return [self.loss_tracker, self.nonfinite_tracker] + self.extra_metrics()

    @staticmethod
    def _unpack(out):
        if not isinstance(out, tuple):
            return out, {}, None
        if len(out) == 2:
            return out[0], out[1], None
        return out

    def _reseed(self, chunk=None):
        """Make this step's random draws a function of (seed, step[, chunk]).

        Dropout masks, view masks and sampled layers come from Keras
        `SeedGenerator`s, whose counters `save_weights` does not save. Setting
        each counter from the optimizer's step before the step runs makes a
        run resumed by `BackupAndRestore` draw exactly what the uninterrupted
        run drew. With `chunk` (a GradCache chunk index, int or int tensor)
        the counters start at that chunk's own range of the step, so both
        passes over a chunk draw the same masks.
        """
        if self._seed_states is None:
            # Not tracked: they belong to the layers that own the generators.
            object.__setattr__(self, "_seed_states", compat.seed_generator_states(self))
        if not self._seed_states:
            return
        counter = tf.cast(self.optimizer.iterations, "int64") * SEED_STRIDE
        if chunk is not None:
            counter += (tf.cast(chunk, "int64") + 1) * CHUNK_STRIDE
        for state in self._seed_states:
            state.assign(tf.stack([tf.convert_to_tensor(state)[0], counter]))

    def train_step(self, data):
        self._reseed()
        variables = self.trainable_variables
        if self.mini_batch_size is not None:
            loss, extras, aux, grads = self.grad_cache_gradients(data, variables)
        else:
            with tf.GradientTape() as tape:
                loss, extras, aux = self._unpack(
                    self.compute_contrastive_loss(data, training=True)
                )
                loss = tf.cast(loss, "float32")
                replicas = tf.distribute.get_strategy().num_replicas_in_sync
                scaled = self.optimizer.scale_loss(loss / replicas)
            grads = tape.gradient(scaled, variables)
        finite = all_finite(
            loss, grads, isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer)
        )
        apply_if_finite(
            self.optimizer,
            [(g, v) for g, v in zip(grads, variables) if g is not None],
            finite,
        )
        self.after_update(aux, finite)
        return self._update_metrics(loss, extras, finite)

    # ------------------------------------------------------------ GradCache
    def grad_cache_gradients(self, data, variables=None):
        """GradCache: `(loss, metrics, aux, gradients)` of a batch, chunk by chunk.

        The gradients are those of `optimizer.scale_loss(loss / replicas)`
        with respect to `variables` (default: the trainable ones), as the
        plain `train_step` takes them; `None` for a variable nothing
        depends on. See the class docstring. Call it after
        `_reseed()` (as `train_step` does).
        """
        variables = self.trainable_variables if variables is None else variables
        size = self.mini_batch_size
        first_leaf = tf.nest.flatten(data)[0]
        batch = tf.shape(first_leaf)[0]
        static_batch = first_leaf.shape[0]
        if static_batch is not None:
            chunks = -(-int(static_batch) // size)
            if chunks > MAX_CHUNKS:
                raise ValueError(
                    f"GradCache handles at most {MAX_CHUNKS} chunks per step; a batch of "
                    f"{static_batch} rows with mini_batch_size={size} makes {chunks}."
                )
        else:
            chunks = (batch + size - 1) // size
        # Rows of the padded batch: a last partial chunk repeats rows from
        # the start; their embeddings get a zero gradient.
        padded = tf.nest.map_structure(
            lambda t: tf.gather(t, tf.range(chunks * size) % batch), data
        )

        def chunk_of(i):
            return tf.nest.map_structure(lambda t: _rows(t, i * size, size), padded)

        def embed_chunk(i):
            self._reseed(chunk=i)
            return self.embed_batch(chunk_of(i), training=True)

        # Pass 1: every chunk's embeddings, no tape (no activations kept).
        first = embed_chunk(0)
        structure = first
        arrays = [
            tf.TensorArray(t.dtype, size=chunks, element_shape=t.shape).write(0, t)
            for t in tf.nest.flatten(first)
        ]

        def embed_body(i, arrays):
            out = tf.nest.flatten(embed_chunk(i))
            return i + 1, [a.write(i, o) for a, o in zip(arrays, out)]

        _, arrays = tf.while_loop(
            lambda i, _: i < chunks, embed_body, (tf.constant(1), arrays),
            parallel_iterations=1,
        )
        flat = [a.concat()[:batch] for a in arrays]

        # Loss of the whole batch; its gradient w.r.t. the embeddings and
        # w.r.t. the weights the loss uses directly (a logit scale).
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        with tf.GradientTape() as tape:
            tape.watch(flat)
            embeddings = tf.nest.pack_sequence_as(structure, flat)
            loss, extras, aux = self._unpack(
                self.embeddings_loss(embeddings, data, training=True)
            )
            loss = tf.cast(loss, "float32")
            scaled = self.optimizer.scale_loss(loss / replicas)
        cached, loss_grads = tape.gradient(scaled, (flat, variables))
        cached = [
            tf.zeros_like(e) if g is None else tf.concat(
                [tf.cast(g, e.dtype), tf.zeros_like(_rows(e, 0, chunks * size - batch))], 0
            )
            for e, g in zip(flat, cached)
        ]

        # Pass 2: each chunk again, with the same draws, under a tape;
        # accumulate d(sum(embeddings * cached gradient)) / d(weights).
        reached = [False] * len(variables)

        def grad_body(i, sums):
            pieces = [_rows(g, i * size, size) for g in cached]
            with tf.GradientTape() as chunk_tape:
                out = tf.nest.flatten(embed_chunk(i))
                surrogate = tf.add_n([
                    tf.reduce_sum(o * tf.stop_gradient(tf.cast(g, o.dtype)))
                    for o, g in zip(out, pieces)
                ])
            grads = chunk_tape.gradient(surrogate, variables)
            new = []
            for k, (total, g) in enumerate(zip(sums, grads)):
                if g is None:
                    new.append(total)
                else:
                    reached[k] = True
                    new.append(total + tf.cast(tf.convert_to_tensor(g), total.dtype))
            return i + 1, new

        zeros = [tf.zeros(v.shape, v.dtype) for v in variables]
        _, sums = tf.while_loop(
            lambda i, _: i < chunks, grad_body, (tf.constant(0), zeros),
            parallel_iterations=1,
        )
        grads = []
        for k, (total, direct) in enumerate(zip(sums, loss_grads)):
            if direct is not None:
                direct = tf.convert_to_tensor(direct)
            if reached[k]:
                grads.append(total if direct is None else total + direct)
            else:
                grads.append(direct)
        return loss, extras, aux, grads

    def test_step(self, data):
        loss, extras, _ = self._unpack(
            self.compute_contrastive_loss(data, training=False)
        )
        return self._update_metrics(tf.cast(loss, "float32"), extras, tf.constant(True))

    def _update_metrics(self, loss, extras, finite):
        self.loss_tracker.update_state(tf.where(finite, loss, 0.0))
        self.nonfinite_tracker.update_state(1.0 - tf.cast(finite, "float32"))
        for metric in self.extra_metrics():
            if metric.name in extras:
                metric.update_state(extras[metric.name])
        return self._metric_logs()

    def _metric_logs(self):
        """`{name: result}` of the metrics, as Keras' step functions return them.

        Under a multi-worker `MultiWorkerMirroredStrategy` Keras 3 reduces each
        per-replica log with `strategy.reduce("MEAN", v, axis=0)`, which fails
        on scalars ("Invalid reduction dimension 0 for input with 0
        dimensions", tensorflow/tensorflow#72388); there the results are
        returned as `[1]` vectors, which that reduction turns back into scalars.
        """
        logs = {m.name: m.result() for m in self.metrics}
        if compat.in_multi_worker_mode(self.distribute_strategy):
            logs = {k: tf.reshape(v, [1]) for k, v in logs.items()}
        return logs

    # --------------------------------------------------------------- config
    def get_config(self):
        """The constructor arguments; subclasses add theirs to `super()`'s."""
        return {
            "encoder": keras.saving.serialize_keras_object(self.encoder),
            "mini_batch_size": self.mini_batch_size,
            "name": self.name,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        for key in cls.encoder_arguments:
            if config.get(key) is not None:
                config[key] = keras.saving.deserialize_keras_object(config[key])
        return cls(**config)


def _rows(x, start, size):
    """Rows `[start, start + size)` of `x` (a static `size`: XLA-friendly)."""
    rank = x.shape.rank
    return tf.slice(x, [start] + [0] * (rank - 1), [size] + [-1] * (rank - 1))

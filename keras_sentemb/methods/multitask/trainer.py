"""`MultitaskModel`: sentiment, paraphrase and similarity heads on one encoder."""

import keras
import tensorflow as tf

from keras_sentemb import compat
from keras_sentemb import validation
from keras_sentemb.methods.multitask.config import PAPER_POOLING
from keras_sentemb.methods.multitask.config import MultitaskConfig
from keras_sentemb.data.multitask import NUM_SENTIMENT_CLASSES
from keras_sentemb.data.multitask import TASKS
from keras_sentemb.losses.info_nce import info_nce_loss
from keras_sentemb.losses.loss_output import LossOutput
from keras_sentemb.losses.multitask import masked_mean
from keras_sentemb.models.pooling import parse_pooling
from keras_sentemb.trainers.base_trainer import BaseTrainer
from keras_sentemb.trainers.base_trainer import all_finite
from keras_sentemb.trainers.base_trainer import apply_if_finite
from keras_sentemb.trainers.base_trainer import dense_gradients
from keras_sentemb.methods.multitask.heads import MultitaskHeads
from keras_sentemb.methods.multitask.heads import _join_pairs
from keras_sentemb.methods.multitask.inference import MultitaskInference
from keras_sentemb.trainers.pcgrad import pcgrad_task_gradients



def apply_if_active(optimizer, grads_and_vars, finite, active, count=None):
    """Update only when `active` (and `finite`); an inactive step is not counted.

    PyTorch's semantics for a parameter without a gradient: AdamW leaves it
    alone entirely (no momentum, no weight decay) and its step count does
    not advance. `apply_if_finite` already leaves weights and slots alone on
    a skipped step but counts the step; here the count is taken back when
    the group was inactive, so `optimizer.iterations` is the number of steps
    at which the group was trained (Adam's bias correction then matches
    PyTorch's per-parameter step). A non-finite active step still counts, as
    everywhere else. Branch-free outside `apply_if_finite`, so it works under
    `MirroredStrategy` like it.

    Args:
        optimizer: a built Keras optimizer.
        grads_and_vars: list of `(gradient, variable)` pairs.
        finite: boolean scalar tensor, identical on every replica.
        active: boolean scalar tensor, identical on every replica.
        count: boolean scalar tensor or None: whether the step counts in
            `optimizer.iterations`. Defaults to `active` (e.g. the heads pass
            `active` and "no loss-scale overflow", to count the steps the
            encoder's `LossScaleOptimizer` counts).
    """
    active = tf.convert_to_tensor(active)
    count = active if count is None else tf.convert_to_tensor(count)
    apply_if_finite(optimizer, grads_and_vars, tf.logical_and(finite, active))
    optimizer.iterations.assign_sub(
        tf.cast(tf.logical_not(count), optimizer.iterations.dtype)
    )


def _copy_optimizer(optimizer, name):
    """A fresh optimizer with `optimizer`'s class and configuration."""
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        optimizer = optimizer.inner_optimizer
    config = optimizer.get_config()
    config["name"] = name
    return type(optimizer).from_config(config)


@keras.saving.register_keras_serializable(package="keras_sentemb")
class MultitaskModel(MultitaskInference, MultitaskHeads, BaseTrainer):
    """Three task heads on the pooled embedding of one `SentenceEncoder`.

    - Sentiment (5-class SST): an MLP with dropout on the sentence vector,
      `dropout -> Dense(hidden, relu) -> dropout -> Dense(5)`, softmax
      cross-entropy.
    - Paraphrase (Quora): both sentences are transformed, `t(x) = x +
      W2 relu(W1 x + b1) + b2`, and scored by a bilinear form
      `t(u)^T B t(v) + c`; trained with binary cross-entropy on the logit.
    - Similarity (STS): the cosine of the two transformed vectors, regressed
      onto `score / 5` with the mean squared error (sentence-transformers'
      `CosineSimilarityLoss`); predictions are `5 * cosine`.

    The transforms are residual and `W2` starts at zero, so an untrained head
    scores with the encoder's own geometry (and `B` starts at the identity).
    `head_style="plain"` makes them the report's plain 2-layer MLPs with
    dropout at each linear layer (section 4.2 / 5.3: "a small (2-layer) MLP
    network with dropout"), `t(x) = W2 dropout(relu(W1 dropout(x)) + b1) + b2`
    with `W2` initialised like `W1`.

    `head_sharing` chooses what the paraphrase and similarity heads share:
    `"first_layer"` (the report's best): one `W1` layer object, used by both
    transforms, each with its own `W2`; `"none"`: two separate transforms;
    `"full"`: one transform (`W1` and `W2`) used by both (the paraphrase head
    keeps its bilinear form). A shared layer is a single set of weights.

    Training (`fit`): every batch holds every task (see
    `keras_sentemb.data.multitask.multitask_batches`), each with a per-row
    `mask`; the tasks of the step have mask 1, the others placeholder rows
    with mask 0. The loss is the mean of the trained tasks' (masked) losses,
    or with `pcgrad=True` the per-task gradients are projected with PCGrad
    (Yu et al.) and averaged. Updates follow PyTorch's AdamW semantics for
    parameters without a gradient: the encoder is updated by the compiled
    optimizer (`learning_rate`) at every step; the heads are split into
    groups of variables used by the same set of tasks (e.g. the shared first
    layer: paraphrase and similarity), each with its own optimizer
    (`head_optimizer`, e.g. at `head_learning_rate`), updated only at steps
    where one of its tasks is trained (`apply_if_active`: weights, slots and
    step count of the other groups are untouched). With `fusion=True` each
    similarity batch then also gets one unsupervised SimCSE update of the
    encoder (two dropout views of its sentences, InfoNCE at
    `fusion_temperature`) with its own optimizer, so `optimizer.iterations`
    stays the number of supervised steps. Dropout masks are drawn from
    `(seed, step)` (`seed_state`, the one difference from the other
    trainers' seeding), so a run resumed by `BackupAndRestore` repeats the
    uninterrupted run exactly. Non-finite
    steps are skipped as in every trainer; mixed precision scales the loss with the compiled
    optimizer's `scale_loss` (the heads' gradients are unscaled by the same
    factor).

    The defaults of the settings the method declares are its own
    (`MultitaskConfig`, in `config.py` beside this module), with the
    report's [CLS] pooling.

    Args:
        encoder: `SentenceEncoder`. The shared encoder (trained with the heads).
        config: `MultitaskConfig` (or a dict of its options). The method's
            options that shape the heads: `head_sharing` (`"first_layer"`,
            `"none"` or `"full"`), `hidden_dim` (width of the heads' hidden
            layers; None is the encoder's output size), `dropout` (of the
            sentiment MLP and of the pair heads' hidden layer), `fusion`
            (fusion training, see above) and `head_style` (`"residual"`: the
            zero-initialised residual transforms above, or `"plain"`: the
            report's 2-layer MLPs). Defaults to the method's.
        num_classes: int. Sentiment classes. Defaults to `5`.
        pooling: str. The pooling the heads read (training and prediction).
        pcgrad: bool. Combine the task gradients with PCGrad instead of
            averaging the losses. Defaults to `False`.
        pcgrad_shuffle: bool. Visit the other tasks in a random order (seeded
            by `(seed, step)`), as in the paper. Defaults to `True`.
        fusion_temperature: float. Defaults to `0.05`.
        seed: int. Seed of PCGrad's task order and of the dropout masks.
            Defaults to `0`.
        **kwargs: single options overriding `config`'s (`head_style="plain"`),
            and Keras `Model` arguments.

    Examples:

    ```python
    encoder = SentenceEncoder.from_preset("default")
    model = MultitaskModel(encoder, pooling="mean")
    model.compile(optimizer=keras.optimizers.AdamW(2e-5),
                  head_optimizer=keras.optimizers.AdamW(1e-3))
    model.fit(tokenize_multitask(encoder, multitask_batches(train)), steps_per_epoch=300)
    model.predict_sentiment(["A lovely film."])          # class ids 0..4
    model.predict_paraphrase(["How do I cook rice?"], ["How to cook rice?"])
    model.predict_similarity(["A man plays."], ["A man is playing."])  # 0..5
    ```

    References:
        - Contrastive Learning for Generalizable Sentence Embeddings
          (Stanford CS224N default-project report).
        - [Reimers & Gurevych, 2019. Sentence-BERT](https://arxiv.org/abs/1908.10084)
        - [Yu et al., 2020. Gradient Surgery for Multi-Task
          Learning](https://arxiv.org/abs/2001.06782)
        - [Gao et al., 2021. SimCSE](https://arxiv.org/abs/2104.08821)
    """

    config_class = MultitaskConfig

    def __init__(
        self,
        encoder,
        config=None,
        num_classes=NUM_SENTIMENT_CLASSES,
        pooling=PAPER_POOLING,
        pcgrad=False,
        pcgrad_shuffle=True,
        fusion_temperature=0.05,
        seed=0,
        **kwargs,
    ):
        super().__init__(encoder, config=config, **kwargs)
        config = self.config
        self.head_style = config.head_style
        self.dropout_rate = config.dropout
        self.num_classes = validation.positive_int(num_classes, "num_classes")
        if self.num_classes < 2:
            raise ValueError(f"`num_classes` must be >= 2. Received: num_classes={num_classes!r}.")
        self.head_sharing = config.head_sharing
        self.pooling = parse_pooling(pooling, encoder.num_layers)
        self.pcgrad = bool(pcgrad)
        self.pcgrad_shuffle = bool(pcgrad_shuffle)
        self.fusion = config.fusion
        self.fusion_temperature = validation.positive_float(fusion_temperature, "fusion_temperature")
        self.seed = validation.non_negative_int(seed, "seed")
        dim = int(encoder.output_dim)
        self.embedding_dim = dim
        self.hidden_dim = config.hidden_dim or dim  # resolved: None is the encoder's width
        d, h = dim, self.hidden_dim

        def dense(units, name, activation=None, initializer="glorot_uniform"):
            return keras.layers.Dense(
                units, activation=activation, kernel_initializer=initializer, name=name
            )

        # Sentiment MLP.
        self.sentiment_dropout = keras.layers.Dropout(self.dropout_rate)
        self.sentiment_hidden = dense(h, "sentiment_hidden", "relu")
        self.sentiment_output = dense(self.num_classes, "sentiment_output")
        self.sentiment_hidden.build((None, d))
        self.sentiment_output.build((None, h))
        # Pair transforms.
        self.pair_dropout = keras.layers.Dropout(self.dropout_rate)
        if self.head_sharing == "none":
            self.paraphrase_first = dense(h, "paraphrase_first", "relu")
            self.similarity_first = dense(h, "similarity_first", "relu")
        else:
            shared = dense(h, "pair_first", "relu")
            self.paraphrase_first = shared
            self.similarity_first = shared
        second_init = "zeros" if self.head_style == "residual" else "glorot_uniform"
        self.paraphrase_second = dense(d, "paraphrase_second", initializer=second_init)
        if self.head_sharing == "full":
            self.similarity_second = self.paraphrase_second
        else:
            self.similarity_second = dense(d, "similarity_second", initializer=second_init)
        for layer in {id(x): x for x in (self.paraphrase_first, self.similarity_first)}.values():
            layer.build((None, d))
        for layer in {id(x): x for x in (self.paraphrase_second, self.similarity_second)}.values():
            layer.build((None, h))
        # Paraphrase bilinear form.
        self.bilinear = self.add_weight(
            shape=(d, d), initializer="identity", name="paraphrase_bilinear"
        )
        self.bilinear_bias = self.add_weight(shape=(), initializer="zeros", name="paraphrase_bias")
        self.task_trackers = {t: keras.metrics.Mean(name=f"{t}_loss") for t in TASKS}
        self.fusion_tracker = keras.metrics.Mean(name="fusion_loss")
        self.head_optimizers = []
        self.fusion_optimizer = None
        self.built = True

    def compute_loss_terms(self, data, training=True):
        """The mean of the trained tasks' losses, as a `LossOutput`.

        Its `metrics` hold the per-task losses and the sentiment accuracy;
        its `aux` the per-task losses (`"task_losses"`), which tasks the
        batch trains (`"active"`) and, with `fusion=True`, the similarity
        batch the fusion update reads (`"similarity"`).
        """
        losses, metrics = self.task_losses(data, training)
        active = self.active_tasks(data)
        total = self._mean_of_active(losses, active)
        metrics.update({f"{t}_loss": losses[t] for t in TASKS})
        aux = {"task_losses": losses, "active": active}
        if self.fusion:
            aux["similarity"] = data["similarity"]
        return LossOutput(total, metrics, aux)

    def fusion_loss(self, data, training=True):
        """Unsupervised SimCSE loss on the similarity batch's sentences.

        All `2B` sentences of the batch (`[sentence1; sentence2]`) go through
        the encoder twice with dropout; each first view must find its second
        view among them (InfoNCE at `fusion_temperature`); masked like the
        task losses.
        """
        batch = data["similarity"]
        x = _join_pairs(batch["sentence1"], batch["sentence2"])
        n = tf.shape(x["token_ids"])[0]
        doubled = {k: tf.concat([v, v], axis=0) for k, v in x.items()}
        z = self.encoder.sentence_vectors(doubled, self.pooling, training=training)
        views = {"first": z[:n], "second": z[n:]}
        per_row = (self.matryoshka or self._fusion_info_nce)(views)
        return masked_mean(per_row, tf.concat([batch["mask"], batch["mask"]], axis=0))

    def _fusion_info_nce(self, views):
        return info_nce_loss(views["first"], views["second"],
                             temperature=self.fusion_temperature, reduction="none")

    def matryoshka_base_loss(self):
        """The fusion InfoNCE: the one multitask loss on the sentence vectors themselves."""
        return self._fusion_info_nce

    def matryoshka_unsupported(self):
        if not self.fusion:
            return ("the multitask task heads read the whole vector; only the fusion loss "
                    "(fusion=True), an InfoNCE on the sentence vectors, trains on prefixes")
        return None

    # -------------------------------------------------------------- compile
    def compile(self, optimizer="adamw", head_optimizer=None, fusion_optimizer=None, **kwargs):
        """Compile with the encoder's optimizer; build the heads' and fusion's.

        Args:
            optimizer: the encoder's optimizer (its `iterations` is the step
                count). Under a `mixed_float16` policy Keras wraps it in a
                `LossScaleOptimizer`.
            head_optimizer: an optimizer whose class and configuration every
                head group gets a fresh copy of (e.g. `AdamW(1e-3)`).
                Defaults to a copy of `optimizer`.
            fusion_optimizer: the optimizer of the fusion updates (copied).
                Defaults to a copy of `optimizer`. Only with `fusion=True`.
            **kwargs: passed to `keras.Model.compile`; `jit_compile`
                defaults to False.
        """
        kwargs.setdefault("jit_compile", False)
        keras.Model.compile(self, optimizer=optimizer, **kwargs)
        encoder_variables = list(self.encoder.trainable_variables)
        if not self.optimizer.built:
            self.optimizer.build(encoder_variables)
        template = head_optimizer if head_optimizer is not None else self.optimizer
        if isinstance(template, str):
            template = keras.optimizers.get(template)
        self.head_optimizers = []
        for tasks, variables in self.head_groups():
            opt = _copy_optimizer(template, "head_" + "_".join(tasks))
            opt.build(variables)
            self.head_optimizers.append(opt)
        self.fusion_optimizer = None
        if self.fusion:
            template = fusion_optimizer if fusion_optimizer is not None else self.optimizer
            if isinstance(template, str):
                template = keras.optimizers.get(template)
            opt = _copy_optimizer(template, "fusion")
            if isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer):
                opt = keras.optimizers.LossScaleOptimizer(opt, name="fusion_loss_scale")
            opt.build(encoder_variables)
            self.fusion_optimizer = opt

    # ----------------------------------------------------------------- steps
    def extra_metrics(self):
        out = [self.task_trackers[t] for t in TASKS]
        return out + ([self.fusion_tracker] if self.fusion else [])

    def dropout_seed_states(self):
        """The state variables of every dropout `SeedGenerator` in the model."""
        return compat.seed_generator_states(self)

    def seed_state(self, index, state, step, chunk=None):
        """Generator `index`'s state at `step`: `[seed * 100_003 + index, step * 4096]`.

        The one way the multitask model's seeding differs from the other
        trainers' (`BaseTrainer.seed_state`: each generator's own seed, a
        counter of `step * SEED_STRIDE`): its dropout masks are a pure
        function of the model's `seed` argument, the generator's position
        and the step. Both make a run resumed by `BackupAndRestore` repeat
        the uninterrupted run; this one is kept because the multitask
        results were measured with it (the other scheme draws other masks).
        No GradCache here, so `chunk` is always None.
        """
        del chunk
        value = tf.stack([tf.constant(self.seed * 100_003 + index, tf.int64), step * 4096])
        return tf.cast(value, state.dtype)

    def step_variables(self):
        """The encoder's trainable variables, then the head groups' (`head_groups`)."""
        heads = [v for _, group in self.head_groups() for v in group]
        return list(self.encoder.trainable_variables) + heads

    def loss_and_gradients(self, data, variables):
        """The mean task loss's gradients, or with `pcgrad=True` PCGrad's combination."""
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        with tf.GradientTape(persistent=self.pcgrad) as tape:
            out = self._checked_loss(
                self.compute_loss_terms(data, training=True), "compute_loss_terms"
            )
            scaled = self.optimizer.scale_loss(out.loss / replicas)
            if self.pcgrad:
                scaled_losses = {
                    t: self.optimizer.scale_loss(out.aux["task_losses"][t] / replicas)
                    for t in TASKS
                }
        if self.pcgrad:
            # PCGrad is positively homogeneous: the loss scale passes through it.
            seed = None
            if self.pcgrad_shuffle:
                seed = tf.stack([tf.constant(self.seed, tf.int64),
                                 tf.cast(self.optimizer.iterations, tf.int64)])
            grads = pcgrad_task_gradients(
                [tape.gradient(scaled_losses[t], variables) for t in TASKS], variables,
                [out.aux["active"][t] for t in TASKS], shuffle=self.pcgrad_shuffle, seed=seed,
            )
            del tape
        else:
            grads = dense_gradients(tape.gradient(scaled, variables))
        return out, grads

    def apply_update(self, out, grads, variables):
        """The encoder's update, then each head group's where one of its tasks is trained."""
        n_enc = len(self.encoder.trainable_variables)
        active = out.aux["active"]
        loss_scaled = isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer)
        finite = all_finite(out.loss, grads, loss_scaled)
        head_grads = grads[n_enc:]
        grads_finite, overflow = finite, tf.constant(False)
        if loss_scaled:
            # Keep the heads in step with the LossScaleOptimizer, which skips
            # an overflowing step without counting it; the heads' gradients
            # are unscaled by the scale of this step (read before the
            # encoder's update may change it).
            grads_finite = all_finite(out.loss, grads, False)
            overflow = tf.logical_and(finite, tf.logical_not(grads_finite))
            scale = tf.cast(tf.identity(self.optimizer.dynamic_scale), "float32")
            head_grads = [None if g is None else g / tf.cast(scale, g.dtype) for g in head_grads]
        apply_if_finite(
            self.optimizer,
            [(g, v) for g, v in zip(grads[:n_enc], variables[:n_enc]) if g is not None],
            finite,
        )
        start = 0
        for (tasks, group), optimizer in zip(self.head_groups(), self.head_optimizers):
            pairs = [
                (g, v) for g, v in zip(head_grads[start : start + len(group)], group)
                if g is not None
            ]
            start += len(group)
            group_active = tf.reduce_any(tf.stack([active[t] for t in tasks]))
            apply_if_active(optimizer, pairs, grads_finite, group_active,
                            count=tf.logical_and(group_active, tf.logical_not(overflow)))
        return finite

    def after_update(self, aux, finite):
        """With `fusion=True`: the fusion update; the step is healthy if both were finite."""
        if not self.fusion:
            return None
        ok = self._fusion_step({"similarity": aux["similarity"]}, aux["active"]["similarity"],
                               list(self.encoder.trainable_variables))
        return tf.logical_and(finite, ok)

    def _fusion_step(self, data, active, variables):
        """One SimCSE update of the encoder on the similarity batch (if trained)."""
        optimizer = self.fusion_optimizer
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        with tf.GradientTape() as tape:
            loss = self.fusion_loss(data, training=True)
            scaled = optimizer.scale_loss(loss / replicas)
        grads = dense_gradients(tape.gradient(scaled, variables))
        finite = all_finite(
            loss, grads, isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
        )
        apply_if_active(
            optimizer, [(g, v) for g, v in zip(grads, variables) if g is not None], finite, active
        )
        self.fusion_tracker.update_state(loss, sample_weight=tf.cast(active, "float32"))
        return tf.logical_or(finite, tf.logical_not(active))

    def update_metrics(self, out, finite, healthy):
        """Each task's loss weighted by whether the batch trains it; the total; `nonfinite`."""
        for t in TASKS:
            self.task_trackers[t].update_state(
                out.aux["task_losses"][t], sample_weight=tf.cast(out.aux["active"][t], "float32")
            )
        self.loss_tracker.update_state(tf.where(finite, out.loss, 0.0))
        self.nonfinite_tracker.update_state(1.0 - tf.cast(healthy, "float32"))
        return self._metric_logs()

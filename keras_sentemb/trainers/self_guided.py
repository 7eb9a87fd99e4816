"""`SelfGuided`: self-guided contrastive learning (SG / SG-OPT) and `fit_self_guided`."""

import logging
import math

import keras
import numpy as np
import tensorflow as tf

from keras_sentemb.losses.self_guided import SG_LOSSES
from keras_sentemb.losses.self_guided import self_guided_loss
from keras_sentemb.models.pooling import masked_max
from keras_sentemb.models.pooling import masked_mean
from keras_sentemb.trainers.base_trainer import BaseTrainer

logger = logging.getLogger(__name__)

VIEW_POOLINGS = ("max", "mean")


def embedding_block_layers(backbone):
    """The layers of a keras-hub backbone's embedding block.

    Token, position and segment embeddings and the embedding LayerNorm (BERT
    family); the `embeddings` block for RoBERTa-style backbones.
    """
    if hasattr(backbone, "embeddings"):  # RoBERTa family: one embedding layer
        layers = [backbone.embeddings]
    else:
        layers = [backbone.token_embedding, backbone.position_embedding]
        if hasattr(backbone, "segment_embedding"):
            layers.append(backbone.segment_embedding)
    if hasattr(backbone, "embeddings_layer_norm"):
        layers.append(backbone.embeddings_layer_norm)
    return layers


class SelfGuided(BaseTrainer):
    """Self-guided contrastive learning: a frozen BERT guides a tuned copy.

    The encoder is cloned into BERT_F (frozen, dropout off) and BERT_T (the
    given `encoder`, tuned and kept). BERT_T's embedding block (token,
    position and segment embeddings and the embedding LayerNorm) is frozen
    too. For each sentence, BERT_F supplies views `h_{i,k}`: its hidden
    states of layer `k = min_layer..L` (0 = the embedding output) pooled with
    `view_pooling`. BERT_T supplies `c_i`, its last-layer [CLS] vector. Both
    go through one shared projection head `f` (Linear(d, p), GELU,
    Linear(p, p), GELU; p = 4096 in the paper) that is not part of the kept
    encoder, and a contrastive loss pulls `f(c_i)` towards `f(h_i)`:

    - `"opt3"` (SG-OPT, the paper's main method): every view of sentence `i`
      is a positive of `c_i`; the views of the other sentences are negatives.
    - `"base"` (SG), `"opt1"`, `"opt2"`: one layer sampled uniformly per
      sentence; see `keras_sentemb.losses.self_guided`.

    The total loss adds `reg_weight * ||theta_F - theta_T||^2`, the squared
    distance between the two encoders' weights (summed over BERT_T's
    trainable weights; the frozen ones are equal in both copies, so the sum
    over all weights is the same).

    After training only BERT_T remains; its `pooling` is set to `"cls"`, so it
    encodes (and saves) with [CLS] pooling.

    Args:
        encoder: `SentenceEncoder`. Becomes BERT_T (trained in place).
        loss: str. `"opt3"`, `"base"`, `"opt1"` or `"opt2"`. Defaults to
            `"opt3"`.
        temperature: float. Softmax temperature of the cosine logits.
            Defaults to `0.01`.
        view_pooling: str. `"max"` (the paper's choice for STS) or `"mean"`
            (its choice for transfer tasks). Defaults to `"max"`.
        min_layer: int. First layer used as a view (0 = embedding output);
            skips the lowest layers. Defaults to `0`.
        projection_dim: int. Width of the projection head. Defaults to `4096`.
        reg_weight: float. Weight lambda of the regulariser. Defaults to
            `0.1`.
        freeze_embeddings: bool. Freeze BERT_T's embedding block. Defaults to
            `True`.
        seed: int or None. Seed of the layer sampler and head initialiser.
            Defaults to `None`.

    Examples:

    ```python
    encoder = SentenceEncoder.from_preset("default")
    trainer = SelfGuided(encoder, loss="opt3")
    trainer.compile(optimizer=keras.optimizers.AdamW(5e-5, beta_2=0.9),
                    jit_compile=False)
    trainer.fit(dataset_of_packed_batches, steps_per_epoch=500)
    trainer.encoder.save("sg_opt_encoder")  # cls pooling
    ```

    References:
        - [Kim, Yoo & Lee, 2021. Self-Guided Contrastive Learning for BERT
          Sentence Representations](https://arxiv.org/abs/2106.07345)
    """

    def __init__(
        self,
        encoder,
        loss="opt3",
        temperature=0.01,
        view_pooling="max",
        min_layer=0,
        projection_dim=4096,
        reg_weight=0.1,
        freeze_embeddings=True,
        seed=None,
        **kwargs,
    ):
        if loss not in SG_LOSSES:
            raise ValueError(f"`loss` must be one of {SG_LOSSES}, received {loss!r}.")
        if view_pooling not in VIEW_POOLINGS:
            raise ValueError(
                f"`view_pooling` must be one of {VIEW_POOLINGS}, received {view_pooling!r}."
            )
        num_layers = encoder.num_layers
        if isinstance(min_layer, bool) or not isinstance(min_layer, (int, np.integer)) or not (
            0 <= min_layer <= num_layers
        ):
            raise ValueError(
                f"`min_layer` must be an int in [0, {num_layers}] (0 = embedding "
                f"output, {num_layers} = last layer), received {min_layer!r}."
            )
        if isinstance(projection_dim, bool) or not isinstance(projection_dim, (int, np.integer)) or projection_dim < 1:
            raise ValueError(f"`projection_dim` must be a positive int, received {projection_dim!r}.")
        if not (isinstance(temperature, (int, float)) and temperature > 0):
            raise ValueError(f"`temperature` must be a number > 0, received {temperature!r}.")
        if not (isinstance(reg_weight, (int, float)) and reg_weight >= 0):
            raise ValueError(f"`reg_weight` must be a number >= 0, received {reg_weight!r}.")
        super().__init__(encoder, **kwargs)
        self.sg_loss = loss
        self.temperature = float(temperature)
        self.view_pooling = view_pooling
        self.min_layer = int(min_layer)
        self.projection_dim = int(projection_dim)
        self.reg_weight = float(reg_weight)
        self.freeze_embeddings = bool(freeze_embeddings)
        self.seed = seed

        # BERT_F: an independent frozen copy (dropout off: run with training=False).
        self.frozen_encoder = encoder.clone(name=f"{encoder.name}_frozen")
        self.frozen_encoder.trainable = False
        # BERT_T: the kept encoder, [CLS] pooling, embedding block frozen.
        encoder.pooling = "cls"
        if self.freeze_embeddings:
            for layer in embedding_block_layers(encoder.backbone):
                layer.trainable = False
        tuned, frozen = encoder.weights, self.frozen_encoder.weights
        if len(tuned) != len(frozen) or any(
            tuple(a.shape) != tuple(b.shape) for a, b in zip(tuned, frozen)
        ):
            raise ValueError("The frozen clone's weights do not line up with the encoder's.")
        self._weight_pairs = list(zip(tuned, frozen))

        init = keras.initializers.RandomNormal(stddev=0.02, seed=seed)
        self.projection_head = keras.Sequential(
            [
                keras.layers.Dense(
                    self.projection_dim, activation="gelu", kernel_initializer=init,
                    dtype="float32", name="sg_projection_1",
                ),
                keras.layers.Dense(
                    self.projection_dim, activation="gelu", kernel_initializer=init,
                    dtype="float32", name="sg_projection_2",
                ),
            ],
            name="sg_projection_head",
        )
        self.projection_head.build((None, encoder.hidden_dim))
        self.seed_generator = keras.random.SeedGenerator(seed)
        self.sg_loss_tracker = keras.metrics.Mean(name="sg_loss")
        self.reg_tracker = keras.metrics.Mean(name="reg")

    def extra_metrics(self):
        return [self.sg_loss_tracker, self.reg_tracker]

    @property
    def num_views(self):
        return self.encoder.num_layers + 1 - self.min_layer

    # -------------------------------------------------------------- pieces
    def views(self, inputs):
        """Pooled BERT_F hidden states of layers `min_layer..L`: [B, V, d] float32."""
        states = self.frozen_encoder.hidden_states(inputs, training=False)
        pool = masked_max if self.view_pooling == "max" else masked_mean
        mask = inputs["padding_mask"]
        pooled = [pool(s, mask) for s in states[self.min_layer :]]
        return tf.stop_gradient(tf.stack(pooled, axis=1))

    def cls_vectors(self, inputs, training=False):
        """BERT_T's last-layer [CLS] vectors: [B, d] float32."""
        states = self.encoder.hidden_states(inputs, training=training)
        return tf.cast(states[-1][:, 0, :], "float32")

    def sample_views(self, views):
        """One view per sentence, the layer drawn uniformly: [B, V, d] -> [B, d]."""
        batch = tf.shape(views)[0]
        index = keras.random.randint(
            (batch,), 0, self.num_views, dtype="int32", seed=self.seed_generator
        )
        return tf.gather(views, index, batch_dims=1)

    def project(self, x):
        """The shared projection head f on [B, d] or [B, V, d] vectors."""
        shape = tf.shape(x)
        flat = self.projection_head(tf.reshape(x, [-1, self.encoder.hidden_dim]))
        return tf.reshape(
            flat, tf.concat([shape[:-1], [self.projection_dim]], axis=0)
        )

    def regularization(self):
        """`||theta_F - theta_T||^2` over BERT_T's trainable weights (float32)."""
        terms = [
            tf.reduce_sum(
                tf.square(tf.cast(frozen, "float32") - tf.cast(tuned, "float32"))
            )
            for tuned, frozen in self._weight_pairs
            if tuned.trainable
        ]
        if not terms:
            return tf.constant(0.0, "float32")
        return tf.add_n(terms)

    def compute_contrastive_loss(self, data, training=True):
        inputs = data[0] if isinstance(data, (tuple, list)) else data
        views = self.views(inputs)
        cls = self.cls_vectors(inputs, training=training)
        if self.sg_loss != "opt3":
            views = self.sample_views(views)
        sg = self_guided_loss(
            self.sg_loss,
            self.project(cls),
            self.project(views),
            temperature=self.temperature,
        )
        reg = self.regularization()
        total = sg + self.reg_weight * reg
        return total, {"sg_loss": sg, "reg": reg}

    def get_config(self):
        return {
            "encoder": keras.saving.serialize_keras_object(self.encoder),
            "loss": self.sg_loss,
            "temperature": self.temperature,
            "view_pooling": self.view_pooling,
            "min_layer": self.min_layer,
            "projection_dim": self.projection_dim,
            "reg_weight": self.reg_weight,
            "freeze_embeddings": self.freeze_embeddings,
            "seed": self.seed,
            "name": self.name,
        }


class _WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup from 0 to `peak` over `warmup_steps`, then linear decay to 0."""

    def __init__(self, peak, total_steps, warmup_steps):
        self.peak = float(peak)
        self.total_steps = max(int(total_steps), 1)
        self.warmup_steps = max(int(warmup_steps), 0)

    def __call__(self, step):
        step = tf.cast(step, "float32")
        warm = float(max(self.warmup_steps, 1))
        up = self.peak * step / warm
        span = float(max(self.total_steps - self.warmup_steps, 1))
        down = self.peak * tf.maximum(0.0, (self.total_steps - step) / span)
        return tf.where(step < self.warmup_steps, up, down)

    def get_config(self):
        return {
            "peak": self.peak,
            "total_steps": self.total_steps,
            "warmup_steps": self.warmup_steps,
        }


def _dev_pairs(dev):
    from keras_sentemb.evaluation.readers import read_stsb

    if dev is None or dev is False:
        return None
    if isinstance(dev, (list, tuple)):
        return list(dev)
    if isinstance(dev, str) and dev.lower() in ("stsb", "sts-b", "default"):
        from keras_sentemb.data.resources import bundled_sts_dir

        return read_stsb(bundled_sts_dir(), split="dev")
    return read_stsb(dev, split="dev")


def fit_self_guided(
    corpus,
    model="default",
    output=None,
    loss="opt3",
    steps=None,
    epochs=1,
    batch_size=16,
    learning_rate=5e-5,
    max_length=None,
    temperature=0.01,
    view_pooling="max",
    min_layer=0,
    projection_dim=4096,
    reg_weight=0.1,
    freeze_embeddings=True,
    warmup_ratio=0.1,
    weight_decay=0.0,
    max_grad_norm=1.0,
    dev="stsb",
    eval_every=50,
    patience=10,
    seed=1,
    strategy=None,
    callbacks=None,
    verbose="auto",
):
    """Train a sentence encoder with self-guided contrastive learning (SG-OPT).

    Clones `model` into a frozen guide BERT_F and a tuned BERT_T, trains
    BERT_T's last-layer [CLS] vector against BERT_F's pooled layer views (see
    `SelfGuided`), evaluates STS-B dev every `eval_every` steps (early
    stopping with `patience`, best weights kept, the starting weights
    included), and returns BERT_T with `cls` pooling. The projection head is
    dropped.

    Defaults are the paper's main setting: SG-OPT (`loss="opt3"`), max-pooled
    views of all layers, temperature 0.01, lambda 0.1, AdamW with betas
    (0.9, 0.9), learning rate 5e-5, batch 16, one epoch, 10% linear warmup
    then linear decay, gradient norm clipped at 1 (as in the authors' code).

    Args:
        corpus: list of str, a text file (one sentence per line), a
            `tf.data.Dataset` of strings or a TFDS name. The paper uses the
            STS-B sentences without labels.
        model: str or `SentenceEncoder`. Preset / folder to start from, or an
            encoder (trained in place). Defaults to `"default"`.
        output: str or None. Folder to save the trained encoder to. Defaults
            to `None`.
        loss: str. `"opt3"` (SG-OPT), `"base"` (SG), `"opt1"` or `"opt2"`.
            Defaults to `"opt3"`.
        steps: int or None. Training steps; `None` = `epochs` passes over the
            corpus. Defaults to `None`.
        epochs: int. Passes over the corpus when `steps` is None. Defaults
            to `1`.
        batch_size: int. Sentences per step. Defaults to `16`.
        learning_rate: float. Peak learning rate. Defaults to `5e-5`.
        max_length: int or None. Truncation length during training (the
            saved encoder keeps its own `max_length`). Defaults to the
            encoder's.
        temperature: float. Defaults to `0.01`.
        view_pooling: str. `"max"` or `"mean"`. Defaults to `"max"`.
        min_layer: int. Skip views below this layer. Defaults to `0`.
        projection_dim: int. Projection head width. Defaults to `4096`.
        reg_weight: float. Lambda of the regulariser. Defaults to `0.1`.
        freeze_embeddings: bool. Freeze BERT_T's embedding block. Defaults
            to `True`.
        warmup_ratio: float. Fraction of steps of linear warmup. Defaults to
            `0.1`.
        weight_decay: float. AdamW weight decay. Defaults to `0.0` (as in the
            authors' code).
        max_grad_norm: float or None. Global gradient-norm clip. Defaults to
            `1.0`.
        dev: str, list or None. STS-B dev set for checkpoint selection:
            `"stsb"` (the bundled STS-B dev), a STS-B folder / csv, a list of
            `(s1, s2, score)`, or `None` (no selection: the last weights).
            Defaults to `"stsb"`.
        eval_every: int. Dev evaluation interval in steps. Defaults to `50`.
        patience: int or None. Evaluations without improvement before
            stopping. Defaults to `10`.
        seed: int or None. Shuffling, sampling and head seed. Defaults to
            `1`.
        strategy: `tf.distribute.Strategy` or None.
        callbacks: list of extra Keras callbacks or None.
        verbose: Keras `fit` verbosity. Defaults to `"auto"`.

    Returns:
        The trained `SentenceEncoder` (BERT_T) with `pooling="cls"`.

    Examples:

    ```python
    encoder = keras_sentemb.fit_self_guided(sentences, steps=500,
                                            output="sg_opt")
    vectors = encoder.encode(["A man plays a guitar."])
    ```

    References:
        - [Kim, Yoo & Lee, 2021. Self-Guided Contrastive Learning for BERT
          Sentence Representations](https://arxiv.org/abs/2106.07345)
    """
    from keras_sentemb.data.corpus import load_corpus
    from keras_sentemb.models import SentenceEncoder
    from keras_sentemb.trainers.callbacks import NonFiniteGuard
    from keras_sentemb.trainers.callbacks import STSDevEvaluation

    for name, value in (("batch_size", batch_size), ("epochs", epochs), ("eval_every", eval_every)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"`{name}` must be a positive int, received {value!r}.")
    if steps is not None and (
        isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1
    ):
        raise ValueError(f"`steps` must be a positive int or None, received {steps!r}.")
    if not (isinstance(learning_rate, (int, float)) and learning_rate > 0):
        raise ValueError(f"`learning_rate` must be a number > 0, received {learning_rate!r}.")
    if not (isinstance(warmup_ratio, (int, float)) and 0 <= warmup_ratio < 1):
        raise ValueError(f"`warmup_ratio` must be in [0, 1), received {warmup_ratio!r}.")
    if loss not in SG_LOSSES:
        raise ValueError(f"`loss` must be one of {SG_LOSSES}, received {loss!r}.")

    sentences = load_corpus(corpus)
    dev_pairs = _dev_pairs(dev)
    if seed is not None:
        keras.utils.set_random_seed(int(seed))
    if isinstance(model, SentenceEncoder):
        encoder = model
    else:
        encoder = SentenceEncoder.from_preset(model)
    if max_length is not None and not (
        isinstance(max_length, (int, np.integer)) and 3 <= max_length <= encoder.max_length
    ):
        raise ValueError(
            f"`max_length` must be an int in [3, {encoder.max_length}], received {max_length!r}."
        )
    if steps is None:
        steps = max(1, (len(sentences) // batch_size) * int(epochs))
    steps = int(steps)

    dataset = (
        tf.data.Dataset.from_tensor_slices(tf.constant(sentences))
        .repeat()
        .shuffle(min(len(sentences), 100_000), seed=seed)
        .batch(batch_size, drop_remainder=len(sentences) >= batch_size)
        .map(lambda s: encoder.preprocess(s, max_length), num_parallel_calls=tf.data.AUTOTUNE)
        .prefetch(tf.data.AUTOTUNE)
    )

    scope = strategy.scope() if strategy is not None else _null_scope()
    with scope:
        trainer = SelfGuided(
            encoder,
            loss=loss,
            temperature=temperature,
            view_pooling=view_pooling,
            min_layer=min_layer,
            projection_dim=projection_dim,
            reg_weight=reg_weight,
            freeze_embeddings=freeze_embeddings,
            seed=seed,
        )
        schedule = _WarmupLinearDecay(
            learning_rate, steps, int(math.ceil(warmup_ratio * steps))
        )
        optimizer = keras.optimizers.AdamW(
            learning_rate=schedule,
            weight_decay=float(weight_decay),
            beta_1=0.9,
            beta_2=0.9,
            epsilon=1e-6,
            global_clipnorm=max_grad_norm,
        )
        optimizer.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])
        trainer.compile(optimizer=optimizer, jit_compile=False)

    cbs = [NonFiniteGuard()]
    if dev_pairs:
        cbs.append(
            STSDevEvaluation(dev_pairs, every=eval_every, restore_best=True, patience=patience)
        )
    cbs += list(callbacks or [])
    trainer.fit(dataset, epochs=1, steps_per_epoch=steps, callbacks=cbs, verbose=verbose)
    encoder = trainer.encoder
    encoder.pooling = "cls"
    if output is not None:
        encoder.save(output)
        logger.info("saved the SG encoder (pooling=cls) to %s", output)
    return encoder


class _null_scope:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

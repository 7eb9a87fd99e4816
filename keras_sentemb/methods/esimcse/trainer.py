"""ESimCSE: word-repetition positives and a momentum queue of negatives."""

import keras
import tensorflow as tf

from keras_sentemb import compat
from keras_sentemb.augment.views import make_view_pair
from keras_sentemb.losses.info_nce import info_nce_loss
from keras_sentemb.losses.loss_output import LossOutput
from keras_sentemb.methods.esimcse.config import ESimCSEConfig
from keras_sentemb.methods.esimcse.config import PAPER_BATCH_SIZE
from keras_sentemb.methods.esimcse.config import PAPER_POOLING
from keras_sentemb.models.memory_queue import MemoryQueue
from keras_sentemb.trainers.base_trainer import BaseTrainer
from keras_sentemb.trainers.training_head import TrainingHead


def esimcse_loss(anchors, positives, queue=None, temperature=0.05):
    """InfoNCE of each anchor against the batch's positives and the queue's rows.

    The logits of anchor `i` are `cos(h_i, h+_j) / temperature` over the
    batch's positives `j`, then `cos(h_i, q_k) / temperature` over the queue's
    rows `k`; the loss is the mean softmax cross-entropy with label `i`.

    Args:
        anchors: float `[b, d]`. The sentences' embeddings.
        positives: float `[b, d]`. Their repeated views' embeddings.
        queue: float `[k, d]` or None. Extra negatives of every anchor.
        temperature: float. The softmax temperature.
    """
    return info_nce_loss(anchors, positives, temperature=temperature, extra_candidates=queue)


def set_trainable(encoder, value):
    """Set `trainable` on an encoder and all its sublayers (toggled: Keras only
    propagates a change)."""
    encoder.trainable = not value
    encoder.trainable = value


def encoder_weights(encoder):
    """The weights an encoder's copy receives, in `clone`'s order: backbone, then head."""
    head = [] if encoder.projection is None else encoder.projection.weights
    return list(encoder.backbone.weights) + list(head)


@keras.saving.register_keras_serializable(package="keras_sentemb")
class ESimCSE(TrainingHead, BaseTrainer):
    """ESimCSE trainer: word-repetition positives, momentum-encoded queue negatives.

    Each batch holds the sentences (`"sentence"`) and their word-repetition
    views (`"positive"`, see `keras_sentemb.methods.esimcse.repetition`).
    Both go through the encoder with dropout on (and, with `mlp="train"`,
    the training-only MLP head, as in SimCSE). The sentence must find its
    own view among the batch's views and the rows of a FIFO queue
    (`MemoryQueue`): InfoNCE at `temperature`.

    The queue holds the views embedded by a momentum encoder: a copy of the
    encoder that receives no gradients, run without dropout and followed by
    the (trained) head as in the paper's code, and updated after each step as
    `theta_m <- momentum * theta_m + (1 - momentum) * theta`. The step's
    loss uses the queue as it was before the step; its momentum embeddings
    are enqueued after the update (the oldest rows leave first). A skipped
    (non-finite) step leaves the momentum encoder as it was.
    `queue_ratio=0` keeps neither: word repetition alone.

    `views` adds ConSERT's views (token shuffle, cutoffs, embedding
    dropout; `keras_sentemb.augment`) on top of the encoder's dropout: the
    first to the sentence, the second to its repeated positive, in training
    only. The queue's momentum rows are encoded without them.

    Inputs of `fit`: dict batches `{"sentence": packed, "positive": packed}`
    (without `"positive"`, the sentence itself is its view: SimCSE with the
    queue).

    Args:
        encoder: `SentenceEncoder`. Trained in place; kept as `.encoder`.
        config: `ESimCSEConfig` (or a dict of its options): `dup_rate` (read
            by the data pipeline), `momentum`, `queue_ratio`, `temperature`,
            `views`, `view_rates`, `mlp`. Defaults to the method's.
        pooling: str. The pooling trained. Defaults to the paper's [CLS].
        batch_size: int. The batch size the queue is sized for: it holds
            `round(queue_ratio * batch_size)` rows. Defaults to the paper's 64.
        momentum_encoder: `SentenceEncoder` or None. The momentum copy (a
            restored trainer's); None copies `encoder`.
        mini_batch_size: int or None. GradCache chunk size (see
            `BaseTrainer`). Defaults to `None` (off).
        seed: int or None. Seed of the view layers. Defaults to `None`.
        **kwargs: single options overriding `config`'s, and Keras `Model`
            arguments.

    Examples:

    ```python
    encoder = SentenceEncoder.from_preset("default")
    trainer = ESimCSE(encoder, pooling="mean", mlp="none", batch_size=64)
    trainer.compile(optimizer=keras.optimizers.AdamW(3e-5))
    trainer.fit(dataset, steps_per_epoch=1000)   # {"sentence", "positive"} batches
    ```

    References:
        - [Wu et al., 2022. ESimCSE: Enhanced Sample Building Method for
          Contrastive Learning of Unsupervised Sentence
          Embedding](https://arxiv.org/abs/2109.04380).
        - [He et al., 2020. MoCo](https://arxiv.org/abs/1911.05722)
    """

    encoder_arguments = ("encoder", "momentum_encoder")
    config_class = ESimCSEConfig

    def __init__(self, encoder, config=None, pooling=PAPER_POOLING, batch_size=PAPER_BATCH_SIZE,
                 momentum_encoder=None, seed=None, **kwargs):
        super().__init__(encoder, config=config, **kwargs)
        self.build_training_head(encoder, pooling, "esimcse_mlp")
        self.seed = seed
        self.view_layers = make_view_pair(self.config.views, self.config.view_rates, seed)
        self.batch_size = int(batch_size)
        self.queue_size = int(round(self.config.queue_ratio * self.batch_size))
        self.queue = self.momentum_encoder = None
        if self.queue_size > 0:
            if momentum_encoder is None:
                momentum_encoder = encoder.clone(name="momentum_encoder")
            set_trainable(momentum_encoder, False)
            self.momentum_encoder = momentum_encoder
            self.queue = MemoryQueue(self.queue_size, encoder.output_dim, name="momentum_queue")
            pairs = list(zip(encoder_weights(momentum_encoder), encoder_weights(encoder)))
            if len(encoder_weights(momentum_encoder)) != len(encoder_weights(encoder)) or any(
                    m.shape != w.shape for m, w in pairs):
                raise ValueError("`momentum_encoder` must have the encoder's architecture.")
        self.queue_tracker = keras.metrics.Mean(name="queue_fill")

    @property
    def temperature(self):
        return self.config.temperature

    def extra_metrics(self):
        return [self.queue_tracker] if self.queue is not None else []

    def get_config(self):
        config = super().get_config()
        config.update({
            "pooling": self.pooling,
            "batch_size": self.batch_size,
            "seed": self.seed,
            "momentum_encoder": (None if self.momentum_encoder is None
                                 else keras.saving.serialize_keras_object(self.momentum_encoder)),
        })
        return config

    # ------------------------------------------------------------- encoding
    def momentum_embed(self, inputs, training):
        """The momentum encoder's vectors (no dropout, no gradients), through the head."""
        x = self.momentum_encoder.sentence_vectors(inputs, self.pooling, training=False)
        return tf.stop_gradient(tf.cast(self.through_head(x, training), tf.float32))

    def embed_batch(self, data, training=True):
        """The sentences' and their views' vectors (and the views' momentum vectors)."""
        positive = data.get("positive", data["sentence"])
        view_a, view_b = self.view_layers
        out = {"anchors": self.embed(data["sentence"], training, view_a),
               "positives": self.embed(positive, training, view_b)}
        if self.momentum_encoder is not None:
            out["keys"] = self.momentum_embed(positive, training)
        return out

    def loss_from_embeddings(self, embeddings, data, training=True):
        anchors = embeddings["anchors"]
        queue = None
        metrics = {}
        if self.queue is not None:
            queue = self.queue.contents()[:, : anchors.shape[-1]]
            metrics["queue_fill"] = tf.cast(tf.convert_to_tensor(self.queue.count), tf.float32)
        loss = esimcse_loss(anchors, embeddings["positives"], queue, self.temperature)
        return LossOutput(loss, metrics, embeddings.get("keys"))

    # ---------------------------------------------------------------- update
    def update_momentum_encoder(self, finite=True):
        """`theta_m <- momentum * theta_m + (1 - momentum) * theta` (unchanged if not `finite`).

        Under a strategy that synchronises through `merge_call`
        (MirroredStrategy) the copies of a variable cannot be assigned from the
        replica context: the update runs once in the cross-replica context,
        where every copy receives it (`finite` agrees across replicas).
        """
        ctx = tf.distribute.get_replica_context()
        if (ctx is not None and ctx.num_replicas_in_sync > 1
                and not compat.strategy_supports_no_merge_call()):
            ctx.merge_call(lambda distribution, finite: self._momentum_step(
                distribution.experimental_local_results(finite)[0]), args=(finite,))
        else:
            self._momentum_step(finite)

    def _momentum_step(self, finite):
        momentum = tf.where(tf.convert_to_tensor(finite), self.config.momentum, 1.0)
        for m, w in zip(encoder_weights(self.momentum_encoder), encoder_weights(self.encoder)):
            rate = tf.cast(momentum, m.dtype)
            m.assign(rate * m + (1.0 - rate) * tf.cast(w, m.dtype))

    def after_update(self, aux, finite):
        if self.momentum_encoder is None:
            return None
        self.update_momentum_encoder(finite)
        if aux is not None:
            self.queue.enqueue(aux)
        return None

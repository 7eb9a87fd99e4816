"""`SelfGuided`: self-guided contrastive learning (SG / SG-OPT)."""

import keras
import tensorflow as tf

from keras_sentemb.methods.self_guided.config import PAPER_POOLING
from keras_sentemb.methods.self_guided.config import SelfGuidedConfig
from keras_sentemb.losses.loss_output import LossOutput
from keras_sentemb.losses.self_guided import self_guided_loss
from keras_sentemb.losses.self_guided import weight_distance_regularizer
from keras_sentemb.models.pooling import masked_max
from keras_sentemb.models.pooling import masked_mean
from keras_sentemb.models.pooling import parse_pooling
from keras_sentemb.trainers.base_trainer import BaseTrainer



@keras.saving.register_keras_serializable(package="keras_sentemb")
class SelfGuided(BaseTrainer):
    """Self-guided contrastive learning: a frozen BERT guides a tuned copy.

    The encoder is cloned into BERT_F (frozen, dropout off) and BERT_T (the
    given `encoder`, tuned and kept). BERT_T's embedding block (token,
    position and segment embeddings and the embedding LayerNorm) is frozen
    too. For each sentence, BERT_F supplies views `h_{i,k}`: its hidden
    states of layer `k = min_layer..max_layer` (0 = the embedding output,
    `max_layer` the last layer by default) pooled with `view_pooling`.
    BERT_T supplies `c_i`, its last-layer [CLS] vector. Both go through one
    shared projection head `f` (Linear(d, p), GELU, Linear(p, p), GELU;
    p = 4096 in the paper; `projection_dim=None` removes it, the paper's
    "w/o projection head" ablation) that is not part of the kept encoder,
    and a contrastive loss pulls `f(c_i)` towards `f(h_i)`:

    - `"opt3"` (SG-OPT, the paper's main method): every view of sentence `i`
      is a positive of `c_i`; the views of the other sentences are negatives.
    - `"base"` (SG), `"opt1"`, `"opt2"`: one layer sampled uniformly per
      sentence; see `keras_sentemb.losses.self_guided`.

    The total loss adds `reg_weight * ||theta_F - theta_T||^2`, the squared
    distance between the two encoders' weights (summed over BERT_T's
    trainable weights; the frozen ones are equal in both copies, so the sum
    over all weights is the same).

    After training only BERT_T remains (`.encoder`); it encodes with the
    pooling it was trained for once the fit scaffold sets it.

    Batches are `{"sentence": packed}` (both encoders read the sentence) or
    `{"sentence": packed, "positive": packed}`: BERT_T encodes `sentence`
    and BERT_F makes its views of `positive`, e.g. the sentence's
    back-translation (the SG paper's "BT + SG-OPT").

    The defaults are the method's (`SelfGuidedConfig`, in `config.py` beside
    this module), with the paper's [CLS] pooling.

    Args:
        encoder: `SentenceEncoder`. Becomes BERT_T (trained in place).
        config: `SelfGuidedConfig` (or a dict of its options). The method's
            options the trainer uses: `loss` (`"opt3"`, `"base"`, `"opt1"`,
            `"opt2"`), `temperature`, `view_pooling` (`"max"` or `"mean"`),
            `min_layer` / `max_layer` (the layers used as views, 0 = the
            embedding output, `max_layer=None` the last), `projection_dim`
            with `projection` (no head when `projection` is False or
            `projection_dim` None), `reg_weight` (lambda of the regulariser)
            and `freeze_embeddings` (BERT_T's embedding block). Defaults to
            the method's.
        seed: int or None. Seed of the layer sampler and head initialiser.
            Defaults to `None`.
        pooling: str. BERT_T's pooling. Defaults to the paper's [CLS].
        **kwargs: single options overriding `config`'s (`loss="opt2"`), and
            Keras `Model` arguments.

    Examples:

    ```python
    encoder = SentenceEncoder.from_preset("default")
    trainer = SelfGuided(encoder, loss="opt3")
    trainer.compile(optimizer=keras.optimizers.AdamW(5e-5, beta_2=0.9))
    trainer.fit(dataset_of_packed_batches, steps_per_epoch=500)
    trainer.encoder.pooling = "cls"
    trainer.encoder.save("sg_opt_encoder")
    ```

    References:
        - [Kim, Yoo & Lee, 2021. Self-Guided Contrastive Learning for BERT
          Sentence Representations](https://arxiv.org/abs/2106.07345)
    """

    config_class = SelfGuidedConfig

    def __init__(self, encoder, config=None, seed=None, pooling=PAPER_POOLING, **kwargs):
        config = self.method_config(config, kwargs)
        num_layers = encoder.num_layers
        min_layer = config.min_layer
        if min_layer > num_layers:
            raise ValueError(
                f"`min_layer` must be an int in [0, {num_layers}] (0 = embedding "
                f"output, {num_layers} = last layer), received {min_layer!r}."
            )
        max_layer = num_layers if config.max_layer is None else config.max_layer
        if not min_layer <= max_layer <= num_layers:
            raise ValueError(
                f"`max_layer` must be an int in [min_layer={min_layer}, {num_layers}] "
                f"({num_layers} = last layer), received {max_layer!r}."
            )
        super().__init__(encoder, config=config, **kwargs)
        self.sg_loss = config.loss
        self.temperature = config.temperature
        self.view_pooling = config.view_pooling
        self.min_layer = min_layer
        self.max_layer = max_layer  # resolved: None is the last layer
        self.projection_dim = config.projection_dim if config.projection else None
        self.reg_weight = config.reg_weight
        self.freeze_embeddings = config.freeze_embeddings
        self.seed = seed
        self.pooling = parse_pooling(pooling, num_layers)

        # BERT_F: an independent frozen copy (dropout off: run with training=False).
        self.frozen_encoder = encoder.clone(name=f"{encoder.name}_frozen")
        self.frozen_encoder.trainable = False
        # BERT_T: the kept encoder, embedding block frozen.
        if self.freeze_embeddings:
            for layer in encoder.adapter.embedding_block_layers():
                layer.trainable = False
        tuned, frozen = encoder.weights, self.frozen_encoder.weights
        if len(tuned) != len(frozen) or any(
            tuple(a.shape) != tuple(b.shape) for a, b in zip(tuned, frozen)
        ):
            raise ValueError("The frozen clone's weights do not line up with the encoder's.")
        self._weight_pairs = list(zip(tuned, frozen))

        self.projection_head = None
        if self.projection_dim is not None:
            self.projection_head = self._build_projection_head(seed, encoder.hidden_dim)
        self.seed_generator = keras.random.SeedGenerator(seed)
        self.sg_loss_tracker = keras.metrics.Mean(name="sg_loss")
        self.reg_tracker = keras.metrics.Mean(name="reg")

    def _build_projection_head(self, seed, hidden_dim):
        init = keras.initializers.RandomNormal(stddev=0.02, seed=seed)
        head = keras.Sequential(
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
        head.build((None, hidden_dim))
        return head

    def extra_metrics(self):
        return [self.sg_loss_tracker, self.reg_tracker]

    @property
    def num_views(self):
        return self.max_layer + 1 - self.min_layer

    # -------------------------------------------------------------- pieces
    def views(self, inputs):
        """Pooled BERT_F hidden states of layers `min_layer..max_layer`: [B, V, d] float32."""
        states = self.frozen_encoder.hidden_states(inputs, training=False)
        pool = masked_max if self.view_pooling == "max" else masked_mean
        mask = inputs["padding_mask"]
        pooled = [pool(s, mask) for s in states[self.min_layer : self.max_layer + 1]]
        return tf.stop_gradient(tf.stack(pooled, axis=1))

    def sentence_vectors(self, inputs, training=False):
        """BERT_T's pooled vectors (the paper: last-layer [CLS]): [B, d] float32."""
        states, mask = self.encoder.forward(inputs, training=training)
        return self.encoder.pool(states, mask, self.pooling)

    def sample_views(self, views):
        """One view per sentence, the layer drawn uniformly: [B, V, d] -> [B, d]."""
        batch = tf.shape(views)[0]
        index = keras.random.randint(
            (batch,), 0, self.num_views, dtype="int32", seed=self.seed_generator
        )
        return tf.gather(views, index, batch_dims=1)

    def project(self, x):
        """The shared projection head f on [B, d] or [B, V, d] vectors (identity without one)."""
        if self.projection_head is None:
            return tf.cast(x, "float32")
        shape = tf.shape(x)
        flat = self.projection_head(tf.reshape(x, [-1, self.encoder.hidden_dim]))
        return tf.reshape(
            flat, tf.concat([shape[:-1], [self.projection_dim]], axis=0)
        )

    def regularization(self):
        """`||theta_F - theta_T||^2` over BERT_T's trainable weights (float32)."""
        return weight_distance_regularizer(self._weight_pairs)

    def compute_loss_terms(self, data, training=True):
        inputs = data["sentence"]
        views = self.views(data.get("positive", inputs))
        cls = self.sentence_vectors(inputs, training=training)
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
        return LossOutput(total, {"sg_loss": sg, "reg": reg})

    def get_config(self):
        config = super().get_config()
        config.update({
            "seed": self.seed,
            "pooling": self.pooling,
        })
        return config

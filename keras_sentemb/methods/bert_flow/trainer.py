"""`BertFlow`: maximum-likelihood training of a flow on frozen sentence vectors."""

import keras
import tensorflow as tf

from keras_sentemb.losses.flow import flow_nll_loss
from keras_sentemb.losses.loss_output import LossOutput
from keras_sentemb.models.glow_flow import GlowFlow
from keras_sentemb.trainers.base_trainer import BaseTrainer


@keras.saving.register_keras_serializable(package="keras_sentemb")
class BertFlow(BaseTrainer):
    """Trains a `GlowFlow` by maximum likelihood on precomputed sentence vectors.

    BERT-flow keeps the encoder frozen and fits the flow alone, so the
    vectors are computed once (`encoder.encode(..., postprocess=False)`) and
    batches are `{"vector": float32 [B, d]}`. The loss is the negative
    log-likelihood per dimension, in nats: `-(log N(f(x); 0, I) + log |det
    df/dx|) / d`, averaged over the batch.

    The trainer has no encoder (`encoder` is None): dev selection chooses
    among the flow's weights (`candidates()` is `{"flow": flow}`), and the
    kept flow is attached to the encoder afterwards
    (`encoder.postprocess = trainer.flow`; `keras_sentemb.fit_flow` does
    all of this).

    A corpus too large to encode up front (a stream) is encoded step by
    step instead: after `set_features(fn)` (the frozen encoder's vectors of
    packed inputs), batches may be `{"sentence": packed}` and each step
    encodes its batch before the flow's update. The encoder takes no part
    in the gradient and is not tracked by the trainer (its weights never
    change).

    Args:
        flow: `GlowFlow`, built (and normally initialised with
            `flow.initialize(vectors)`).

    Examples:

    ```python
    flow = GlowFlow(384, pooling="mean_last2", seed=0)
    flow.build()
    flow.initialize(vectors[:1024])
    trainer = BertFlow(flow)
    trainer.compile(optimizer=keras.optimizers.Adam(1e-3))
    trainer.fit(tf.data.Dataset.from_tensor_slices({"vector": vectors}).batch(32))
    ```

    References:
        - [Li et al., 2020. On the Sentence Embeddings from Pre-trained
          Language Models](https://arxiv.org/abs/2011.05864)
    """

    encoder_arguments = ()

    def __init__(self, flow, **kwargs):
        if not isinstance(flow, GlowFlow):
            raise TypeError(f"`flow` must be a GlowFlow; received {type(flow).__name__}.")
        super().__init__(None, **kwargs)
        if not flow.built:
            flow.build()
        self.flow = flow
        self._features = None
        self.nll_bits_tracker = keras.metrics.Mean(name="bits_per_dim")

    def extra_metrics(self):
        return [self.nll_bits_tracker]

    def candidates(self):
        return {"flow": self.flow}

    def select(self, name):
        """Nothing to switch: the flow's best weights are restored in place."""

    def set_features(self, features):
        """Encode `{"sentence": packed}` batches with `features` (packed -> float32 `[B, d]`).

        A plain function, not saved with the trainer: Keras does not track
        what it closes over (the frozen encoder).
        """
        self._features = features

    def _vectors(self, data):
        """`{"vector": ...}` batches as they are; `{"sentence": packed}` ones encoded (frozen)."""
        if "sentence" not in data:
            return data
        if self._features is None:
            raise ValueError("Batches of sentences need `features` (the frozen encoder's "
                             "vectors); call trainer.set_features(fn) first.")
        return {"vector": tf.stop_gradient(self._features(data["sentence"]))}

    def train_step(self, data):
        return super().train_step(self._vectors(data))

    def test_step(self, data):
        return super().test_step(self._vectors(data))

    def compute_loss_terms(self, data, training=True):
        x = tf.cast(data["vector"], self.flow.compute_dtype)
        nll, bits = flow_nll_loss(self.flow.log_prob(x), self.flow.input_dim)
        return LossOutput(nll, {"bits_per_dim": bits})

    def get_config(self):
        return {"flow": keras.saving.serialize_keras_object(self.flow),
                "mini_batch_size": self.mini_batch_size, "name": self.name}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["flow"] = keras.saving.deserialize_keras_object(config["flow"])
        return cls(**config)

"""`SentenceEncoder`: a keras-hub backbone, its tokenizer and a pooling."""

import keras
import numpy as np
import tensorflow as tf

from keras_sentemb.augment.views import apply_embedding_view
from keras_sentemb.augment.views import apply_position_view
from keras_sentemb.compat import require_tensorflow_backend
from keras_sentemb.models.backbone_adapter import BackboneAdapter
from keras_sentemb.models.encoder_persistence import EncoderPersistence
from keras_sentemb.models.encoding_engine import EncodingEngine
from keras_sentemb.models.kernel_install import install_kernels
from keras_sentemb.models.kernels import KernelPolicy
from keras_sentemb.models.loading import register_serializable_classes
from keras_sentemb.models.pooling import parse_pooling
from keras_sentemb.models.pooling import pool_hidden_states
from keras_sentemb.models.post_processing import PostProcessing
from keras_sentemb.models.text_normalization import check_mode

require_tensorflow_backend()


@keras.saving.register_keras_serializable(package="keras_sentemb")
class SentenceEncoder(EncoderPersistence, EncodingEngine, keras.Model):
    """Turns sentences into vectors: keras-hub backbone, tokenizer, pooling.

    The encoder runs the backbone's own layers (token, position and segment
    embeddings, the embedding LayerNorm and dropout, every Transformer layer)
    so that it can expose the hook points the training methods need: all
    hidden states (for layer-wise pooling and self-guided views), custom
    position ids (token shuffling) and a transform of the embedding output
    (cutoff, dropout and adversarial views). Weights are the backbone's;
    nothing is copied.

    Call it on packed token inputs (`token_ids`, `padding_mask`, optional
    `segment_ids` and `position_ids`) to get float32 sentence vectors, or use
    `encode()` on raw strings.

    Args:
        backbone: `keras_hub.models.BertBackbone` or
            `keras_hub.models.RobertaBackbone` (or a subclass).
        tokenizer: the matching keras-hub tokenizer.
        pooling: str or None. `"cls"`, `"mean"`, `"max"`, `"mean_last2"`,
            `"first_last"` or `"layer:K"`. `None` means the model declares
            no pooling of its own: it encodes with `"mean"`, and the training
            methods use their paper's pooling (`pooling="auto"` in every
            `fit_*`). Defaults to `None`.
        normalize: bool. L2-normalise the output vectors. Defaults to `False`.
        max_length: int. Maximum tokens per sentence, special tokens included;
            longer inputs are truncated. Defaults to `256`.
        projection_dim: int or None. Adds a dense head of this size after
            pooling. Defaults to `None` (no head).
        projection_activation: str or None. Activation of the head. Defaults
            to `None`.
        text_normalization: str or None. `"bert_uncased"` / `"bert_cased"`
            apply Hugging Face BERT's text cleaning (and lower-casing plus
            accent stripping for uncased) before the keras-hub tokenizer, whose
            own lowercasing and accent stripping are then turned off; `None`
            leaves the tokenizer as it is. Encoders loaded from Hugging Face
            BERT folders use it, for token-for-token parity with the
            reference tokenizer. Defaults to `None`.
        postprocess: a `keras_sentemb.models.PostProcessing` layer (e.g.
            `Whitening`, `GlowFlow`), its serialized config, or None. Runs
            on the sentence vectors after pooling, the projection head and
            the L2 normalisation (see `postprocess`). Defaults to `None`.
        kernels: a `keras_sentemb.KernelPolicy`, `"auto"`, `"fused"`,
            `"plain"` or a dict op -> choice. Which fused kernels of this
            package the backbone runs (GELU, layer norm, dropout, the fused
            Transformer layer) instead of the plain TensorFlow ops; `"auto"`
            picks per op from the kernels measured faster on this CPU's
            instruction set (`keras_sentemb.kernel_report()` shows the
            choice). Saved in the config. Defaults to `"auto"`.

    Examples:

    ```python
    encoder = SentenceEncoder.from_preset("default")
    vectors = encoder.encode(["A man is playing a guitar.", "Hello!"])
    encoder.save("my_encoder")
    encoder = SentenceEncoder.from_preset("my_encoder")
    ```

    References:
        - [Reimers & Gurevych, 2019](https://arxiv.org/abs/1908.10084)
    """
    def __init__(
        self,
        backbone,
        tokenizer,
        pooling=None,
        normalize=False,
        max_length=256,
        projection_dim=None,
        projection_activation=None,
        text_normalization=None,
        postprocess=None,
        kernels=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.adapter = BackboneAdapter(backbone)
        # Which fused kernels the backbone may run, bound to its layers (see models/kernels).
        object.__setattr__(self, "_kernels", KernelPolicy.of(kernels))
        install_kernels(backbone, self.adapter.transformer_layers, self._kernels)
        self.text_normalization = check_mode(text_normalization)
        if text_normalization is not None:
            tokenizer.lowercase = False
            tokenizer.strip_accents = False
        self.backbone = backbone
        self.tokenizer = tokenizer
        self.num_layers = len(backbone.transformer_layers)
        object.__setattr__(self, "_declared_pooling", None)
        if pooling is not None:
            self.pooling = pooling
        self.normalize = bool(normalize)
        limit = int(backbone.max_sequence_length)
        if not isinstance(max_length, (int, np.integer)) or not (
            3 <= max_length <= limit
        ):
            raise ValueError(
                f"`max_length` must be an int in [3, {limit}] for this "
                f"backbone, received {max_length!r}."
            )
        self.max_length = int(max_length)
        self.projection_dim = projection_dim
        self.projection_activation = projection_activation
        self.projection = None
        if projection_dim is not None:
            self.projection = keras.layers.Dense(
                int(projection_dim),
                activation=projection_activation,
                dtype=backbone.dtype_policy,
                name="projection",
            )
            self.projection.build((None, backbone.hidden_dim))
        # BERT's pooler ([CLS] -> dense -> tanh) is not part of any sentence
        # pooling here; freezing it keeps optimizers from tracking weights
        # that never receive gradients.
        if self.adapter.pooler is not None:
            self.adapter.pooler.trainable = False
        self._encode_fns = {}
        self._tokenize_graph = None
        object.__setattr__(self, "_precision_twins", {})
        # At most one layer; a tracked list so that replacing it untracks the old one.
        self._postprocess_layers = []
        if postprocess is not None:
            self.postprocess = postprocess
            if pooling is not None:
                self.pooling = pooling  # must agree with the layer's
        object.__setattr__(self, "_training_report", None)
        object.__setattr__(self, "_model_card", None)
        # The backbone (and head) are built, so the encoder is too.
        self.built = True

    # --------------------------------------------------------------- pooling
    @property
    def pooling(self):
        """The pooling `encode` and `call` use (`"mean"` when none is declared)."""
        return self._declared_pooling or "mean"

    def __setattr__(self, name, value):
        # `encoder.pooling = p` declares the pooling. Not a property setter:
        # TensorFlow's AutoTrackable skips `setattr` when the new value *is*
        # the current one, and an undeclared encoder already reads "mean".
        if name == "pooling":
            pooling = parse_pooling(value, self.num_layers)
            self._check_postprocess_pooling(pooling)
            object.__setattr__(self, "_declared_pooling", pooling)
            return
        if name == "postprocess":
            self._set_postprocess(value)
            return
        super().__setattr__(name, value)

    # ----------------------------------------------------------- postprocess
    @property
    def postprocess(self):
        """The post-processing layer (`Whitening`, `GlowFlow`, ...) or None.

        It maps the encoder's vectors (after pooling, the projection head and
        the encoder's L2 normalisation) to its own, in `encode`, in `call`
        (hence evaluation and the exported SavedModel) and in `save`.
        Assigning a layer fitted on a pooling makes that pooling the
        encoder's; encoding with another pooling is then refused. Assign
        None to remove it.
        """
        layers = self.__dict__.get("_postprocess_layers")
        return layers[0] if layers else None

    def _set_postprocess(self, layer):
        if isinstance(layer, dict):
            register_serializable_classes()
            layer = keras.saving.deserialize_keras_object(layer)
        if layer is not None and not isinstance(layer, PostProcessing):
            raise TypeError(
                "`postprocess` must be a keras_sentemb PostProcessing layer (Whitening, "
                f"GlowFlow) or None; received {type(layer).__name__}."
            )
        if layer is not None:
            if layer.input_dim != self.base_output_dim:
                raise ValueError(
                    f"The post-processing layer takes {layer.input_dim}-dimensional vectors; "
                    f"this encoder outputs {self.base_output_dim}."
                )
            if not layer.built:
                layer.build((None, layer.input_dim))
        self._postprocess_layers.clear()
        self._encode_fns.clear()
        self.__dict__.get("_precision_twins", {}).clear()  # copies made with the old layer
        if layer is not None:
            self._postprocess_layers.append(layer)
            if layer.pooling is not None:
                object.__setattr__(
                    self, "_declared_pooling", parse_pooling(layer.pooling, self.num_layers)
                )

    def _check_postprocess_pooling(self, pooling):
        layer = self.postprocess
        if layer is not None and layer.pooling is not None and pooling != layer.pooling:
            raise ValueError(
                f"This encoder's {type(layer).__name__} was fitted on {layer.pooling} "
                f"pooling; it cannot post-process {pooling} pooling. Encode with "
                f"pooling={layer.pooling!r}, or remove it (encoder.postprocess = None)."
            )

    @property
    def kernels(self):
        """The encoder's `KernelPolicy` (which fused kernels its backbone may run)."""
        return self._kernels

    @property
    def declared_pooling(self):
        """The pooling the model declares, or None.

        Set by a sentence-transformers pooling config or a keras_sentemb
        folder when loading, by the `pooling` constructor argument, or by
        assigning `encoder.pooling`. A raw backbone (a keras-hub preset, a
        plain Hugging Face BERT folder) declares none; the `fit_*` functions
        then use their paper's pooling.
        """
        return self._declared_pooling

    @property
    def training_report(self):
        """How this encoder was trained (a `TrainingReport`), or None.

        Set by the `fit_*` functions on the encoder they return: method,
        hyperparameters, data, steps, pooling and why, the dev history and
        the selection.
        """
        return self._training_report

    @training_report.setter
    def training_report(self, report):
        object.__setattr__(self, "_training_report", report)

    @property
    def model_card(self):
        """The model card (a dict) the encoder was loaded with, or None.

        `save` writes a new card (`keras_sentemb.model_card`) built from the
        `training_report` and this one.
        """
        return self._model_card

    @model_card.setter
    def model_card(self, card):
        object.__setattr__(self, "_model_card", card)

    # Special token ids are read lazily: when a `.keras` archive is loaded the
    # tokenizer's vocabulary asset arrives after the constructor has run.
    @property
    def start_token_id(self):
        return int(self.tokenizer.start_token_id)

    @property
    def end_token_id(self):
        return int(self.tokenizer.end_token_id)

    @property
    def pad_token_id(self):
        return int(self.tokenizer.pad_token_id)

    # ------------------------------------------------------------------ graph
    @property
    def hidden_dim(self):
        return int(self.backbone.hidden_dim)

    @property
    def base_output_dim(self):
        """Size of the sentence vectors before the post-processing layer."""
        return int(self.projection_dim or self.backbone.hidden_dim)

    @property
    def output_dim(self):
        """Size of the sentence vectors."""
        if self.postprocess is not None:
            return int(self.postprocess.output_dim)
        return self.base_output_dim

    def embed_tokens(self, token_ids, segment_ids=None, position_ids=None):
        """Embedding output after the embedding LayerNorm, before dropout.

        See `BackboneAdapter.embed`.
        """
        return self.adapter.embed(token_ids, segment_ids, position_ids)

    def forward(
        self,
        inputs,
        training=False,
        dropout=None,
        position_transform=None,
        embedding_transform=None,
    ):
        """The one forward pass: every hidden state and the padding mask used.

        Runs the backbone's own layers (embeddings, LayerNorm, dropout, every
        Transformer layer) with two hook points where views act:

        - `position_transform(position_ids, padding_mask) -> position_ids`,
          before the position embedding (token shuffling);
        - `embedding_transform(embeddings, padding_mask) -> (embeddings,
          padding_mask)`, on the embedding output after LayerNorm and before
          the embedding dropout (cutoffs, dropout, adversarial noise). A
          transform that changes the mask (span cutoff) changes it for
          attention and for pooling.

        Args:
            inputs: dict with `token_ids` and `padding_mask` (`[B, T]`) and
                optional `segment_ids` and `position_ids`.
            training: bool. Whether the hooks act in training mode (passed on
                to nothing here; the hooks close over it) and the default of
                `dropout`.
            dropout: bool or None. Whether the backbone's own dropout is on.
                Defaults to `training`.
            position_transform: callable or None.
            embedding_transform: callable or None.

        Returns:
            `(states, padding_mask)`: a list of `num_layers + 1` tensors
            `[B, T, hidden_dim]` (the embedding output, then each layer's
            output) and the padding mask the layers used.
        """
        dropout = training if dropout is None else dropout
        padding_mask = inputs["padding_mask"]
        token_ids = inputs["token_ids"]
        position_ids = inputs.get("position_ids")
        if position_transform is not None:
            if position_ids is None:
                length = tf.shape(token_ids)[1]
                position_ids = tf.tile(
                    tf.range(length, dtype=tf.int32)[None, :], [tf.shape(token_ids)[0], 1]
                )
            position_ids = position_transform(position_ids, padding_mask)
        x = self.adapter.embed(token_ids, inputs.get("segment_ids"), position_ids)
        if embedding_transform is not None:
            x, padding_mask = embedding_transform(x, padding_mask)
        x = self.adapter.dropout(x, training=bool(dropout))
        states = [x]
        for layer in self.adapter.transformer_layers:
            x = layer(x, padding_mask=padding_mask, training=bool(dropout))
            states.append(x)
        return states, padding_mask

    def hidden_states(self, inputs, training=False):
        """All hidden states (`forward` without hooks): `num_layers + 1` tensors."""
        return self.forward(inputs, training=training)[0]

    def sentence_vectors(
        self,
        inputs,
        pooling=None,
        training=False,
        dropout=None,
        view=None,
        embedding_hook=None,
        normalize=False,
    ):
        """Float32 sentence vectors of packed inputs, optionally through a view.

        What the trainers encode with: `forward` (with the view's position or
        embedding hook), pooling, the projection head if the encoder has one,
        and no L2 normalisation unless asked (the losses normalise).

        Args:
            inputs: packed inputs (see `forward`).
            pooling: str or None. Defaults to the encoder's pooling.
            training: bool. Whether the view acts (and the default of
                `dropout`).
            dropout: bool or None. The backbone's dropout. Defaults to
                `training`.
            view: a view layer from `keras_sentemb.augment` or None.
            embedding_hook: callable or None. Called on the embedding output
                after the view (e.g. to watch it with a tape or add an
                adversarial perturbation); returns the embeddings to use.
            normalize: bool. L2-normalise. Defaults to `False`.

        Returns:
            float32 tensor `[B, output_dim]`.
        """
        position_transform = embedding_transform = None
        if view is not None or embedding_hook is not None:

            if view is not None and getattr(view, "stage", None) == "positions":
                position_transform = lambda p, m: apply_position_view(  # noqa: E731
                    view, p, m, training=training
                )

            def embedding_transform(x, mask):
                x, mask = apply_embedding_view(view, x, mask, training=training)
                if embedding_hook is not None:
                    x = embedding_hook(x)
                return x, mask

        states, padding_mask = self.forward(
            inputs,
            training=training,
            dropout=dropout,
            position_transform=position_transform,
            embedding_transform=embedding_transform,
        )
        self._check_postprocess_pooling(self._resolve_pooling(pooling))
        pooled = self.pool(states, padding_mask, pooling)
        return tf.cast(self.head(pooled, normalize=normalize), "float32")

    def _resolve_pooling(self, pooling):
        return self.pooling if pooling is None else parse_pooling(pooling, self.num_layers)

    def pool(self, hidden_states, padding_mask, pooling=None):
        """Pool hidden states with `pooling` (default: the encoder's)."""
        return pool_hidden_states(hidden_states, padding_mask, self._resolve_pooling(pooling))

    def head(self, pooled, normalize=None, postprocess=True):
        """The projection head (if any), the L2 normalisation, then the post-processing.

        Args:
            pooled: float tensor `[B, hidden_dim]`.
            normalize: bool or None. Defaults to the encoder's `normalize`.
            postprocess: bool. Apply the post-processing layer, if any.
                Defaults to `True`.
        """
        x = pooled
        if self.projection is not None:
            x = keras.ops.cast(self.projection(x), "float32")
        if self.normalize if normalize is None else normalize:
            x = tf.math.l2_normalize(x, axis=-1, epsilon=1e-12)
        if postprocess and self.postprocess is not None:
            x = tf.cast(self.postprocess(x), "float32")
        return x

    def call(self, inputs, training=False, pooling=None):
        self._check_postprocess_pooling(self._resolve_pooling(pooling))
        states = self.hidden_states(inputs, training=training)
        return self.head(self.pool(states, inputs["padding_mask"], pooling))

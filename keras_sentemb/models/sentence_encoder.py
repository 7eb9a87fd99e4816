"""`SentenceEncoder`: a keras-hub backbone, its tokenizer and a pooling."""

import json
import math
import os

import keras
import numpy as np
import tensorflow as tf

from keras_sentemb.models import presets
from keras_sentemb.models.backbone_adapter import BackboneAdapter
from keras_sentemb.models.cpu_threads import check_max_batch_tokens
from keras_sentemb.models.cpu_threads import run_batches
from keras_sentemb.models.fused_gelu import fuse_gelu
from keras_sentemb.models.loading import POSTPROCESS_FORMAT_VERSION
from keras_sentemb.models.loading import POSTPROCESS_WEIGHTS
from keras_sentemb.models.pooling import parse_pooling
from keras_sentemb.models.pooling import pool_hidden_states
from keras_sentemb.models.text_normalization import check_mode
from keras_sentemb.models.text_normalization import normalize_text

FORMAT_VERSION = 1
PROJECTION_WEIGHTS = "sentemb_projection.npz"
TRAINING_REPORT = "training_report.json"
# Sequence lengths that `encode` pads a batch up to, so that a handful of
# compiled shapes serve every input.
BUCKETS = (8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224,
           256, 320, 384, 448, 512)


# `precision` -> the Keras dtype policy of the backbone that computes.
PRECISIONS = {"float32": "float32", "bfloat16": "mixed_bfloat16"}


def check_precision(precision):
    """`None` -> `"float32"`; else one of `PRECISIONS`, or a clear error."""
    if precision is None:
        return "float32"
    if precision not in PRECISIONS:
        raise ValueError(
            f"`precision` must be one of {sorted(PRECISIONS)}. Received: precision={precision!r}."
        )
    return precision


def check_truncate_dim(truncate_dim, dim):
    """`truncate_dim` as an int in [1, dim], else a clear error."""
    if (not isinstance(truncate_dim, (int, np.integer)) or isinstance(truncate_dim, bool)
            or not 1 <= truncate_dim <= dim):
        raise ValueError(
            f"`truncate_dim` must be an int in [1, {dim}] (the model's dimension); "
            f"received {truncate_dim!r}."
        )
    return int(truncate_dim)


def truncate_embeddings(vectors, truncate_dim, normalize):
    """The first `truncate_dim` columns of `vectors`, L2-renormalised if `normalize`."""
    vectors = np.asarray(vectors, np.float32)[..., :truncate_dim]
    if normalize:
        norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
        vectors = vectors / np.maximum(norms, np.float32(1e-12))
    return np.ascontiguousarray(vectors, np.float32)


def bucket_length(length, buckets=BUCKETS):
    """Smallest bucket >= `length` (or `length` rounded up to 64 past the last)."""
    for b in buckets:
        if b >= length:
            return b
    return int(math.ceil(length / 64) * 64)


def to_text(sentence, index=None):
    """Return `sentence` as `str`: bytes are decoded as UTF-8 with replacement."""
    if isinstance(sentence, str):
        return sentence
    if isinstance(sentence, (bytes, bytearray, np.bytes_)):
        return bytes(sentence).decode("utf-8", errors="replace")
    where = "" if index is None else f" at index {index}"
    raise TypeError(
        f"Sentences must be str or bytes; received {type(sentence).__name__}"
        f"{where}: {sentence!r:.80}"
    )


@keras.saving.register_keras_serializable(package="keras_sentemb")
class SentenceEncoder(keras.Model):
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
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.adapter = BackboneAdapter(backbone)
        # One fused XLA kernel per GELU forward / backward (see fused_gelu).
        fuse_gelu(self.adapter.transformer_layers)
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
        from keras_sentemb.models.post_processing import PostProcessing

        if isinstance(layer, dict):
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
            from keras_sentemb.augment.views import apply_embedding_view
            from keras_sentemb.augment.views import apply_position_view

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

    # --------------------------------------------------------- preprocessing
    def tokenize(self, sentences):
        """Tokenize a string tensor [N] into a ragged int32 tensor (no specials).

        Invalid UTF-8 is replaced by U+FFFD first, so that bytes from any
        source tokenize instead of failing. Eager calls run a compiled graph.
        """
        if tf.executing_eagerly():
            if self._tokenize_graph is None:
                self._tokenize_graph = tf.function(
                    self._tokenize,
                    input_signature=[tf.TensorSpec([None], tf.string)],
                )
            return self._tokenize_graph(tf.convert_to_tensor(sentences, tf.string))
        return self._tokenize(sentences)

    def clean_text(self, sentences):
        """What the tokenizer receives: UTF-8 repaired, then `text_normalization`.

        Invalid UTF-8 becomes U+FFFD; see `normalize_text` for the rest.

        Args:
            sentences: string tensor `[N]`.

        Returns:
            string tensor `[N]`.
        """
        sentences = tf.strings.unicode_transcode(
            sentences,
            input_encoding="UTF-8",
            output_encoding="UTF-8",
            errors="replace",
        )
        return normalize_text(sentences, self.text_normalization)

    def _tokenize(self, sentences):
        tokens = self.tokenizer(self.clean_text(sentences))
        if not isinstance(tokens, tf.RaggedTensor):
            tokens = tf.RaggedTensor.from_tensor(tokens)
        return tf.cast(tokens, "int32")

    def pack(self, tokens, max_length=None):
        """Truncate, add start/end tokens and pad a ragged batch (in graph).

        Args:
            tokens: ragged int tensor [B, None] from `tokenize`.
            max_length: int or None. Defaults to the encoder's `max_length`.

        Returns:
            dict with `token_ids`, `padding_mask`, `segment_ids` ([B, T], T =
            the longest packed row of this batch).
        """
        max_length = self.max_length if max_length is None else max_length
        tokens = tokens[:, : max_length - 2]
        batch = tokens.nrows()
        start = tf.fill([batch, 1], self.start_token_id)
        end = tf.fill([batch, 1], self.end_token_id)
        packed = tf.concat([start, tokens, end], axis=1)
        token_ids = packed.to_tensor(default_value=self.pad_token_id)
        padding_mask = tf.ones_like(packed).to_tensor(default_value=0)
        return {
            "token_ids": token_ids,
            "padding_mask": padding_mask,
            "segment_ids": tf.zeros_like(token_ids),
        }

    def preprocess(self, sentences, max_length=None):
        """Raw strings (tensor [B]) to packed model inputs; usable in tf.data."""
        return self.pack(self.tokenize(sentences), max_length)

    # ---------------------------------------------------------------- encode
    def _encode_fn(self, pooling, normalize, postprocess=True):
        # Everything the trace bakes in is part of the key (a string: TF's
        # object tracking refuses dicts with tuple keys). Assigning a
        # post-processing layer clears the cache.
        key = f"{pooling}|{int(bool(normalize))}|{int(self.normalize)}|{int(bool(postprocess))}"
        fn = self._encode_fns.get(key)
        if fn is None:
            spec = tf.TensorSpec([None, None], tf.int32)

            @tf.function(input_signature=[spec, spec], reduce_retracing=True)
            def fn(token_ids, padding_mask):
                inputs = {"token_ids": token_ids, "padding_mask": padding_mask}
                states = self.hidden_states(inputs, training=False)
                pooled = tf.cast(self.pool(states, padding_mask, pooling), "float32")
                out = self.head(pooled, postprocess=postprocess)
                if normalize:
                    out = tf.math.l2_normalize(out, axis=-1, epsilon=1e-12)
                return out

            self._encode_fns[key] = fn
        return fn

    def _tokenize_to_numpy(self, sentences, chunk_size=4096):
        """Token ids (no specials) of every sentence: flat array + offsets."""
        flat, lengths = [], []
        for i in range(0, len(sentences), chunk_size):
            chunk = tf.constant(
                [s.encode("utf-8", errors="replace") for s in sentences[i : i + chunk_size]]
            )
            ragged = self.tokenize(chunk)
            flat.append(ragged.flat_values.numpy())
            lengths.append(ragged.row_lengths().numpy())
        flat = np.concatenate(flat).astype(np.int32)
        lengths = np.concatenate(lengths).astype(np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        return flat, offsets, lengths

    def encode(
        self,
        sentences,
        batch_size=128,
        max_length=None,
        pooling=None,
        normalize=False,
        show_progress=None,
        precision=None,
        postprocess=True,
        parallel_batches=None,
        max_batch_tokens=None,
        truncate_dim=None,
    ):
        """Encode raw sentences into a float32 numpy array `[n, dim]`.

        Sentences are tokenized in bulk, sorted by length and batched so that
        each batch is padded only to a bucket length just above its longest
        sentence; the forward pass is a compiled `tf.function`. Rows come back
        in input order.

        Args:
            sentences: list of str (or bytes, decoded as UTF-8 with
                replacement), or a single str.
            batch_size: int. Sentences per forward pass. Defaults to `128`.
            max_length: int or None. Truncation length in tokens, special
                tokens included. Defaults to the encoder's `max_length`.
            pooling: str or None. Overrides the encoder's pooling.
            normalize: bool. L2-normalise the outputs (in addition to any
                normalisation the encoder itself applies). Defaults to `False`.
            show_progress: bool or None. Keras progress bar; `None` shows it
                for 5,000 sentences or more.
            precision: str or None. `"float32"` (default) or `"bfloat16"`:
                the forward pass runs in bfloat16 (Keras' `mixed_bfloat16`
                policy on a copy of this encoder that takes its current
                weights; pooling and outputs stay float32). Fast only on
                CPUs with native bfloat16 (AVX512-BF16 / AMX) and on GPUs.
                Defaults to `None` (float32).
            postprocess: bool. Apply the post-processing layer (if any);
                `False` returns the vectors it takes (what it was fitted
                on). Defaults to `True`.
            parallel_batches: int or None. Batches computed at the same time
                (on Python threads; see `keras_sentemb.models.cpu_threads`).
                Defaults to `None`: 2 on a host without GPU or TPU, else 1.
                The vectors do not depend on it.
            truncate_dim: int or None. Keep only the first `truncate_dim`
                dimensions (Matryoshka truncation), L2-renormalised when the
                vectors are normalised (the encoder's `normalize` or the
                `normalize` argument). Defaults to `None` (all).

        Returns:
            float32 numpy array `[n, output_dim]` (`[n, base_output_dim]`
            without post-processing; `[n, truncate_dim]` when truncated);
            `[dim]` for a single str.
        """
        if truncate_dim is not None:
            dim = self.output_dim if postprocess and self.postprocess is not None else (
                self.base_output_dim)
            truncate_dim = check_truncate_dim(truncate_dim, dim)
            full = self.encode(
                sentences, batch_size=batch_size, max_length=max_length, pooling=pooling,
                normalize=normalize, show_progress=show_progress, precision=precision,
                postprocess=postprocess, parallel_batches=parallel_batches,
                max_batch_tokens=max_batch_tokens,
            )
            return truncate_embeddings(full, truncate_dim, self.normalize or bool(normalize))
        precision = check_precision(precision)
        if precision != "float32":
            twin = self.precision_twin(precision)
            return twin.encode(
                sentences, batch_size=batch_size, max_length=max_length,
                pooling=self.pooling if pooling is None else pooling,
                normalize=normalize, show_progress=show_progress, postprocess=postprocess,
                parallel_batches=parallel_batches, max_batch_tokens=max_batch_tokens,
            )
        single = isinstance(sentences, (str, bytes))
        if single:
            sentences = [sentences]
        if isinstance(sentences, np.ndarray):
            if sentences.ndim != 1:
                raise ValueError(
                    f"`sentences` must be one-dimensional; received an array of shape "
                    f"{sentences.shape}."
                )
            sentences = sentences.tolist()
        if isinstance(sentences, (dict, set, frozenset)) or not hasattr(sentences, "__len__"):
            raise TypeError(
                "`sentences` must be a str or a sequence (list, tuple, 1-D array) of str; "
                f"received a {type(sentences).__name__}."
            )
        sentences = [to_text(s, i) for i, s in enumerate(sentences)]
        if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"`batch_size` must be a positive int, received {batch_size!r}.")
        max_length = self.max_length if max_length is None else max_length
        limit = int(self.backbone.max_sequence_length)
        if not isinstance(max_length, (int, np.integer)) or not 3 <= max_length <= limit:
            raise ValueError(
                f"`max_length` must be an int in [3, {limit}], received {max_length!r}."
            )
        max_batch_tokens = check_max_batch_tokens(max_batch_tokens)
        pooling = self._resolve_pooling(pooling)
        postprocess = bool(postprocess) and self.postprocess is not None
        if postprocess:
            self._check_postprocess_pooling(pooling)
        n = len(sentences)
        dim = self.output_dim if postprocess else self.base_output_dim
        out = np.zeros((n, dim), dtype=np.float32)
        if n == 0:
            return out[0] if single else out
        fn = self._encode_fn(pooling, bool(normalize), postprocess)
        if show_progress is None:
            show_progress = n >= 5000
        progbar = keras.utils.Progbar(n, unit_name="sentence") if show_progress else None
        batches = self.packed_batches(sentences, batch_size, max_length, max_batch_tokens)
        for idx, vectors in run_batches(fn, batches, parallel_batches):
            out[idx] = vectors
            if progbar is not None:
                progbar.add(len(idx))
        return out[0] if single else out

    def precision_twin(self, precision):
        """This encoder computing in `precision`, with its current weights.

        A copy built once per precision (`clone(dtype=...)`); every call
        copies this encoder's weights into it, so it follows training.
        `"float32"` is the encoder itself.
        """
        precision = check_precision(precision)
        policy = PRECISIONS[precision]
        if policy == self.backbone.dtype_policy.name:
            return self
        twin = self._precision_twins.get(precision)
        if twin is None:
            twin = self.clone(name=f"{self.name}_{precision}", dtype=policy)
            self._precision_twins[precision] = twin
        else:
            twin.set_weights(self.get_weights())
        return twin

    def encode_to_files(
        self,
        input_glob,
        output_dir,
        shard_size=100_000,
        batch_size=128,
        max_length=None,
        pooling=None,
        normalize=False,
        precision=None,
        shard_format="npy",
        show_progress=None,
        model_name=None,
        max_batch_tokens=None,
    ):
        """Encode text files of any size to embedding shards on disk, resumably.

        Streams the lines of every file matching `input_glob` (sorted; one
        sentence per line, empty lines included, as `encode`'s CLI reads
        them) and writes one shard per `shard_size` lines of a file: the
        float32 embeddings and the `(file_index, line)` of each row. Only one
        shard is in memory at a time, so memory does not grow with the
        corpus. Shards are written atomically and a `manifest.json` records
        the settings; running the same call again skips the shards already
        written (a run with other settings is refused). Paths may be local
        or any filesystem TensorFlow reads (`gs://...`). Read the result with
        `keras_sentemb.models.sharded_encoding.read_embedding_shards`.

        Args:
            input_glob: str. A file, or a glob of files.
            output_dir: str. Folder of the shards (created).
            shard_size: int. Lines per shard. Defaults to `100_000`.
            batch_size, max_length, pooling, normalize, precision,
                max_batch_tokens: as in `encode`.
            shard_format: str. `"npy"` (`embeddings-F-S.npy` float32 and
                `ids-F-S.npy` int64 `[rows, 2]`) or `"tfrecord"`
                (`embeddings-F-S.tfrecord` of `tf.train.Example`s with
                `file`, `line` and `embedding`). Defaults to `"npy"`.
            show_progress: bool or None. One line per shard on stderr.
                Defaults to `None` (on for more than one shard).
            model_name: str or None. The model recorded in the manifest
                (compared when resuming). Defaults to the encoder's name.

        Returns:
            dict: the manifest (inputs, rows, dimension, shards).

        Examples:

        ```python
        encoder = SentenceEncoder.from_preset("default")
        encoder.encode_to_files("corpus/*.txt", "corpus_embeddings", shard_size=50_000)
        ```
        """
        from keras_sentemb.models.sharded_encoding import encode_to_files

        return encode_to_files(
            self, input_glob, output_dir, shard_size=shard_size, batch_size=batch_size,
            max_length=max_length, pooling=pooling, normalize=normalize,
            precision=precision, shard_format=shard_format, show_progress=show_progress,
            model_name=model_name, max_batch_tokens=max_batch_tokens,
        )

    def packed_batches(self, sentences, batch_size, max_length, max_batch_tokens=None):
        """Yield `(indices, token_ids, padding_mask)` batches, longest first.

        All sentences are tokenized in bulk, sorted by length, and each batch
        is padded to the smallest bucket length that holds its longest
        sentence (capped at `max_length`), so a handful of shapes serve any
        input. A batch ends early where the next sentence's own bucket is at
        most half the batch's width: a few long outliers then make a small
        batch of their own instead of padding up to `batch_size` short
        sentences to their length. A batch also holds at most
        `max_batch_tokens // width` rows (at least one; `None`: no cap), which
        bounds its activations: wide batches get fewer rows. `indices` are
        the batch rows' positions in `sentences`.
        """
        flat, offsets, lengths = self._tokenize_to_numpy(sentences)
        kept = np.minimum(lengths, max_length - 2)
        order = np.argsort(-kept, kind="stable")
        widths = np.minimum(
            [bucket_length(int(k) + 2) for k in range(int(kept.max(initial=0)) + 1)], max_length
        )[kept[order]]  # each sorted sentence's own padded width
        begin, n = 0, len(sentences)
        while begin < n:
            width = int(widths[begin])
            rows = batch_size if max_batch_tokens is None else max(1, max_batch_tokens // width)
            end = min(begin + min(batch_size, rows), n)
            shorter = np.flatnonzero(widths[begin + 1 : end] * 2 <= width)
            if shorter.size:
                end = begin + 1 + int(shorter[0])
            idx = order[begin:end]
            begin = end
            token_ids = np.full((len(idx), width), self.pad_token_id, np.int32)
            mask = np.zeros((len(idx), width), np.int32)
            for row, i in enumerate(idx):
                k = kept[i]
                token_ids[row, 0] = self.start_token_id
                token_ids[row, 1 : k + 1] = flat[offsets[i] : offsets[i] + k]
                token_ids[row, k + 1] = self.end_token_id
                mask[row, : k + 2] = 1
            yield idx, token_ids, mask

    # ----------------------------------------------------------- save / load
    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "backbone": keras.saving.serialize_keras_object(self.backbone),
                "tokenizer": keras.saving.serialize_keras_object(self.tokenizer),
                "pooling": self.declared_pooling,
                "normalize": self.normalize,
                "max_length": self.max_length,
                "projection_dim": self.projection_dim,
                "projection_activation": self.projection_activation,
                "text_normalization": self.text_normalization,
                "postprocess": (
                    None if self.postprocess is None
                    else keras.saving.serialize_keras_object(self.postprocess)
                ),
            }
        )
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["backbone"] = keras.saving.deserialize_keras_object(config["backbone"])
        config["tokenizer"] = keras.saving.deserialize_keras_object(config["tokenizer"])
        return cls(**config)

    def sentemb_config(self):
        """The settings written to `sentemb_config.json` by `save`."""
        config = {
            "format_version": FORMAT_VERSION,
            "pooling": self.declared_pooling,
            "normalize": self.normalize,
            "max_length": self.max_length,
            "projection_dim": self.projection_dim,
            "projection_activation": self.projection_activation,
            "text_normalization": self.text_normalization,
        }
        if self.postprocess is not None:
            config["format_version"] = POSTPROCESS_FORMAT_VERSION
            config["postprocess"] = keras.saving.serialize_keras_object(self.postprocess)
        return config

    def save(self, filepath, overwrite=True, **kwargs):
        """Save to a folder (a keras-hub preset plus `sentemb_config.json`).

        The folder is written under a temporary sibling and renamed into
        place when complete (`keras_sentemb.io_utils.atomic_folder`): a crash
        or a full disk never leaves a half-written model, and an earlier
        model at `filepath` is replaced only by a complete new one. A folder
        holding anything but a model is refused. A path ending in `.keras`
        is saved as a single Keras archive instead (`keras.saving.load_model`
        reads it back, `safe_mode=True` included). A folder also gets the
        model card (`model_card.json`, `MODEL_CARD.md`; see
        `keras_sentemb.model_card`).

        Args:
            filepath: str or path. The folder (created if needed) or a
                `.keras` file.
            overwrite: bool. Replace an existing model. Defaults to `True`.
        """
        from keras_sentemb.io_utils import atomic_folder
        from keras_sentemb.model_card import build_model_card
        from keras_sentemb.model_card import write_model_card

        filepath = os.fspath(filepath)
        if filepath.endswith(".keras"):
            return super().save(filepath, overwrite=overwrite, **kwargs)
        with atomic_folder(filepath, overwrite=overwrite) as folder:
            self.backbone.save_to_preset(str(folder))
            self.tokenizer.save_to_preset(str(folder))
            if self.projection is not None:
                kernel, bias = (np.asarray(w) for w in self.projection.get_weights())
                np.savez(folder / PROJECTION_WEIGHTS, kernel=kernel, bias=bias)
            if self.postprocess is not None:
                weights = self.postprocess.get_weights()
                np.savez(folder / POSTPROCESS_WEIGHTS,
                         **{f"w{i}": np.asarray(w) for i, w in enumerate(weights)})
            if self.training_report is not None:
                with open(folder / TRAINING_REPORT, "w", encoding="utf-8") as f:
                    json.dump(self.training_report.to_dict(), f, indent=2)
            write_model_card(folder, build_model_card(self))
            with open(folder / presets.SENTEMB_CONFIG, "w", encoding="utf-8") as f:
                json.dump(self.sentemb_config(), f, indent=2)
        return filepath

    @classmethod
    def from_preset(
        cls,
        preset="default",
        pooling=None,
        normalize=None,
        max_length=None,
        dtype=None,
        num_layers=None,
        **kwargs,
    ):
        """Load an encoder from `"default"`, a folder, or a keras-hub preset.

        Settings are taken, in order of precedence, from the arguments, the
        folder's `sentemb_config.json` (keras_sentemb folders) or its
        sentence-transformers config files (`1_Pooling/config.json`,
        `modules.json`, `sentence_bert_config.json`), else mean pooling, no
        normalisation and the backbone's maximum length (capped at 512).

        Args:
            preset: str or path. `"default"` (the bundled all-MiniLM-L6-v2), a
                folder written by `save`, a Hugging Face /
                sentence-transformers folder, or a keras-hub preset name or
                handle.
            pooling: str or None. Overrides the stored pooling.
            normalize: bool or None. Overrides the stored normalisation.
            max_length: int or None. Overrides the stored maximum length.
            dtype: str or None. The backbone's dtype policy.
            num_layers: int or None. Keep only the first `num_layers`
                Transformer layers (a smaller, faster encoder; see
                `truncate_backbone`). Defaults to all.

        Returns:
            A `SentenceEncoder`.
        """
        from keras_sentemb.model_card import read_model_card
        from keras_sentemb.models.backbone_adapter import truncate_backbone
        from keras_sentemb.models.loading import load_components

        resolved = presets.resolve_model(preset)
        parts = load_components(resolved, dtype=dtype)
        if num_layers is not None:
            parts.backbone = truncate_backbone(parts.backbone, num_layers)
        settings = parts.settings
        for name, value in (
            ("pooling", pooling),
            ("normalize", normalize),
            ("max_length", max_length),
        ):
            if value is not None:
                settings[name] = value
        if parts.postprocess is not None:
            kwargs.setdefault("postprocess", parts.postprocess)
        encoder = cls(parts.backbone, parts.tokenizer, **settings, **kwargs)
        if parts.projection_weights is not None:
            encoder.projection.set_weights(parts.projection_weights)
        if resolved.kind == "sentemb":
            encoder.model_card = read_model_card(resolved.location)
        return encoder

    def clone(self, name=None, dtype=None, backbone=None, tokenizer=None):
        """An independent copy with identical weights (e.g. for CT's towers).

        The backbone and head are rebuilt from their configs and given copies
        of the weights; the tokenizer (which has no weights) is shared.

        Args:
            name: str or None. The copy's name. Defaults to `"<name>_copy"`.
            dtype: str or None. A Keras dtype policy for the copy (e.g.
                `"mixed_bfloat16"`, `"float32"`). Defaults to this encoder's.
            backbone: a keras-hub backbone or None. Used instead of a copy of
                this one (e.g. one with a grown vocabulary, see
                `add_vocabulary`); settings and head are copied as usual.
            tokenizer: a keras-hub tokenizer or None. Used instead of this
                one's.
        """
        if backbone is None:
            config = self.backbone.get_config()
            if dtype is not None:
                config["dtype"] = dtype
            backbone = type(self.backbone).from_config(config)
            backbone.set_weights(self.backbone.get_weights())
        elif dtype is not None:
            raise ValueError("Pass either `backbone` or `dtype` to `clone`, not both.")
        copy = type(self)(
            backbone,
            self.tokenizer if tokenizer is None else tokenizer,
            pooling=self.declared_pooling,
            normalize=self.normalize,
            max_length=self.max_length,
            projection_dim=self.projection_dim,
            projection_activation=self.projection_activation,
            text_normalization=self.text_normalization,
            name=name or f"{self.name}_copy",
        )
        if self.projection is not None:
            copy.projection.set_weights(self.projection.get_weights())
        copy.model_card = self.model_card
        if self.postprocess is not None:
            layer = keras.saving.deserialize_keras_object(
                keras.saving.serialize_keras_object(self.postprocess)
            )
            if not layer.built:
                layer.build((None, layer.input_dim))
            layer.set_weights(self.postprocess.get_weights())
            copy.postprocess = layer
        return copy

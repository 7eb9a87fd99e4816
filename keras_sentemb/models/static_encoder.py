"""`StaticEncoder`: one vector per token, averaged; no Transformer at inference."""

import json
import os

import keras
import numpy as np

from keras_sentemb.io_utils import atomic_folder
from keras_sentemb.models import static_runtime
from keras_sentemb.models.encoding_engine import as_sentence_list
from keras_sentemb.models.truncation import check_truncate_dim
from keras_sentemb.models.truncation import truncate_embeddings

TRAINING_REPORT = "training_report.json"


class StaticEncoder(keras.Model):
    """A static sentence encoder: a token-vector table, per-token weights, mean pooling.

    A sentence's vector is the mean of its tokens' vectors, each scaled by
    its token's weight (Zipf or SIF weights from `distill_static`),
    L2-normalised when `normalize`. Special tokens (`[CLS]`, `[SEP]`,
    padding) never count. There is no Transformer: encoding is a lookup and
    an average, tens of times faster than the teacher on a CPU, at a known
    cost in quality (see docs/guides/static.md).

    `encode` runs in numpy with the teacher's Hugging Face tokenizer
    (`keras_sentemb.models.static_runtime`), exactly as `keras-sentemb
    encode` does without importing TensorFlow; calling the model on packed
    token ids (`token_ids`, `padding_mask`, as the `SentenceEncoder`
    takes them) runs the same computation in TensorFlow, for training and
    for export (SavedModel, LiteRT). It has the `SentenceEncoder` interface
    for use: `encode` (which `keras_sentemb.evaluate_sts` and `evaluate_retrieval` call),
    `save`, and `from_preset` (or `--model DIR` on the command line) to load a folder.

    Args:
        table: float array `[V, d]`. One vector per token id.
        tokenizer: a `tokenizers.Tokenizer` (the teacher's `tokenizer.json`).
        weights: float array `[V]` or None. Per-token weights (not trained).
            Defaults to 1 each.
        keep: float array `[V]` or None. 0 for special tokens, 1 otherwise.
            Defaults to 1 each.
        normalize: bool. L2-normalise the sentence vectors. Defaults to
            `True` (cosine similarity is what static vectors are used with,
            and what model2vec does).
        max_length: int or None. Tokens kept per sentence; None keeps all
            (sentence-transformers' `StaticEmbedding` does not cut either).
        pca: `(mean [D], components [D, d])` or None. The map from the
            teacher's vector space to the table's (from distillation);
            training targets go through it. Defaults to `None`.
        info: dict or None. How the table was made (teacher, distillation
            settings), saved with it.
        table_dtype: str. How `save` stores the table: `"float32"`,
            `"float16"` or `"int8"` (one scale per row). Defaults to
            `"float32"`.

    Examples:

    ```python
    teacher = keras_sentemb.SentenceEncoder.from_preset("default")
    static = keras_sentemb.distill_static(teacher, dims=256)
    static.encode(["A man is playing a guitar."]).shape   # (1, 256)
    static.save("static_minilm")
    static = keras_sentemb.StaticEncoder.from_preset("static_minilm")
    ```

    References:
        - [Tulkens & van Dongen, 2024. Model2Vec: Distill a Small Fast Model
          from any Sentence Transformer](https://github.com/MinishLab/model2vec)
        - [Arora et al., 2017. A Simple but Tough-to-Beat Baseline for
          Sentence Embeddings](https://openreview.net/forum?id=SyK00v5xx)
    """

    def __init__(self, table, tokenizer, weights=None, keep=None, normalize=True,
                 max_length=None, pca=None, info=None, table_dtype="float32", **kwargs):
        super().__init__(**kwargs)
        table = np.asarray(table, np.float32)
        if table.ndim != 2:
            raise ValueError(f"`table` must be 2-D [vocabulary, dim]; received shape {table.shape}.")
        vocab = table.shape[0]
        self.embeddings = self.add_weight(
            shape=table.shape, initializer=keras.initializers.Constant(table),
            name="embeddings", dtype="float32")
        self.token_weights = self._constant(weights, vocab, "token_weights")
        self.keep = self._constant(keep, vocab, "keep")
        object.__setattr__(self, "tokenizer", tokenizer)
        object.__setattr__(self, "pca", None if pca is None else tuple(
            np.asarray(p, np.float32) for p in pca))
        object.__setattr__(self, "info", dict(info or {}))
        object.__setattr__(self, "_training_report", None)
        object.__setattr__(self, "model_card", None)
        self.normalize = bool(normalize)
        if max_length is not None and (not isinstance(max_length, (int, np.integer))
                                       or max_length < 1):
            raise ValueError(f"`max_length` must be a positive int or None; received "
                             f"{max_length!r}.")
        self.max_length = max_length
        if table_dtype not in static_runtime.TABLE_DTYPES:
            raise ValueError(f"`table_dtype` must be one of {static_runtime.TABLE_DTYPES}; "
                             f"received {table_dtype!r}.")
        self.table_dtype = table_dtype
        self.built = True

    def _constant(self, values, vocab, name):
        values = np.ones(vocab, np.float32) if values is None else np.asarray(values, np.float32)
        if values.shape != (vocab,):
            raise ValueError(f"`{name}` must have shape ({vocab},); received {values.shape}.")
        return self.add_weight(shape=(vocab,), initializer=keras.initializers.Constant(values),
                               name=name, dtype="float32", trainable=False)

    # ------------------------------------------------------------ interface
    pooling = "mean"
    declared_pooling = "mean"
    postprocess = None  # no post-processing layer (whitening, flow) on a static encoder

    @property
    def output_dim(self):
        """Size of the sentence vectors."""
        return int(self.embeddings.shape[1])

    base_output_dim = output_dim

    @property
    def vocabulary_size(self):
        return int(self.embeddings.shape[0])

    @property
    def training_report(self):
        """How this encoder was trained (a `TrainingReport`), or None."""
        return self._training_report

    @training_report.setter
    def training_report(self, report):
        object.__setattr__(self, "_training_report", report)

    def runtime(self):
        """The numpy `StaticTable` of the current weights (made anew: training changes them).

        Folding the weights into a table of 30,522 x 256 takes about 20 ms,
        nothing beside encoding.
        """
        return static_runtime.StaticTable(
            self.embeddings.numpy(), self.token_weights.numpy(), self.keep.numpy(),
            self.tokenizer, normalize=self.normalize, max_length=self.max_length)

    # --------------------------------------------------------------- graph
    def call(self, inputs, training=False):
        """Sentence vectors of packed ids: `{"token_ids", "padding_mask"}` (int `[B, L]`)."""
        import tensorflow as tf

        ids = tf.cast(inputs["token_ids"], "int32")
        mask = tf.cast(inputs["padding_mask"], "float32") * tf.gather(self.keep, ids)
        scale = tf.gather(self.token_weights, ids) * mask
        summed = tf.reduce_sum(tf.gather(self.embeddings, ids) * scale[..., None], axis=1)
        out = summed / tf.maximum(tf.reduce_sum(mask, axis=1, keepdims=True), 1.0)
        if self.normalize:
            out = tf.math.l2_normalize(out, axis=-1, epsilon=1e-12)
        return out

    def encode(self, sentences, batch_size=1024, max_length=None, pooling=None, normalize=False,
               show_progress=None, precision=None, postprocess=True, parallel_batches=None,
               max_batch_tokens=None, truncate_dim=None):
        """Encode raw sentences into a float32 numpy array `[n, dim]` (numpy, no TensorFlow).

        Takes `SentenceEncoder.encode`'s arguments. `pooling` may only be
        None or `"mean"` (a static model averages); `precision`,
        `postprocess`, `parallel_batches`, `max_batch_tokens` and
        `show_progress` do not apply (the table's stored dtype is its
        precision) and are accepted so that code written for a
        `SentenceEncoder` runs unchanged.

        Args:
            sentences: list of str (or bytes), or a single str.
            batch_size: int. Sentences per tokenizing batch. Defaults to `1024`.
            max_length: int or None. Tokens kept per sentence. Defaults to
                the encoder's (None: all).
            pooling: None or `"mean"`.
            normalize: bool. L2-normalise (also when the encoder does not).
            truncate_dim: int or None. Keep the first `truncate_dim`
                dimensions, renormalised when the vectors are normalised.

        Returns:
            float32 array `[n, dim]`, or `[dim]` for a single str.

        Raises:
            ValueError: `pooling` is not mean, or a size is not positive.
        """
        if pooling not in (None, "mean"):
            raise ValueError(f"A static encoder averages its token vectors (pooling 'mean'); "
                             f"received pooling={pooling!r}.")
        if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"`batch_size` must be a positive int, received {batch_size!r}.")
        if max_length is not None and (not isinstance(max_length, (int, np.integer))
                                       or max_length < 1):
            raise ValueError(f"`max_length` must be a positive int, received {max_length!r}.")
        sentences, single = as_sentence_list(sentences)
        out = self.runtime().encode(sentences, batch_size=int(batch_size),
                                    normalize=bool(normalize), max_length=max_length)
        if truncate_dim is not None:
            truncate_dim = check_truncate_dim(truncate_dim, self.output_dim)
            out = truncate_embeddings(out, truncate_dim, self.normalize or bool(normalize))
        return out[0] if single else out

    # --------------------------------------------------------- save / load
    def folded_table(self):
        """The float32 table with the per-token weights multiplied in (`[V, d]`).

        What the export formats store: sentence-transformers'
        `StaticEmbedding` and model2vec average plain token vectors. The
        special tokens' rows are zero: such a token typed in the text then
        adds nothing, and normalised vectors keep their direction.
        """
        scale = self.token_weights.numpy() * self.keep.numpy()
        return self.embeddings.numpy() * scale[:, None]

    def static_config(self):
        """The settings written to `sentemb_static.json`."""
        return {"format_version": static_runtime.FORMAT_VERSION, "normalize": self.normalize,
                "max_length": self.max_length, "table_dtype": self.table_dtype,
                "dim": self.output_dim, "vocabulary_size": self.vocabulary_size, **self.info}

    def table_arrays(self, dtype=None):
        """The `model.safetensors` arrays (table in `dtype`, default the encoder's)."""
        arrays = static_runtime.stored_table(self.embeddings.numpy(), dtype or self.table_dtype)
        arrays["weights"] = self.token_weights.numpy()
        arrays["keep"] = self.keep.numpy()
        if self.pca is not None:
            arrays["pca_mean"], arrays["pca_components"] = self.pca
        return arrays

    def save(self, filepath, overwrite=True, **kwargs):
        """Save to a static folder, atomically (see `keras_sentemb.models.static_runtime`).

        The folder is written under a temporary sibling and renamed into
        place when complete; `keras-sentemb encode --model DIR` then encodes
        with it without importing TensorFlow.

        Args:
            filepath: str or path. The folder.
            overwrite: bool. Replace an existing model. Defaults to `True`.

        Returns:
            The path.
        """
        from safetensors.numpy import save_file

        filepath = os.fspath(filepath)
        with atomic_folder(filepath, overwrite=overwrite) as folder:
            save_file(self.table_arrays(), str(folder / static_runtime.TABLE_FILE))
            self.tokenizer.save(str(folder / static_runtime.TOKENIZER_FILE))
            if self.training_report is not None:
                with open(folder / TRAINING_REPORT, "w", encoding="utf-8") as f:
                    json.dump(self.training_report.to_dict(), f, indent=2)
            with open(folder / static_runtime.STATIC_CONFIG, "w", encoding="utf-8") as f:
                json.dump(self.static_config(), f, indent=2)
        return filepath

    @classmethod
    def from_preset(cls, preset, normalize=None, max_length=None, **kwargs):
        """Load a static folder written by `save` (or `keras-sentemb train static`).

        Args:
            preset: str or path. The folder.
            normalize: bool or None. Overrides the stored setting.
            max_length: int or None. Overrides the stored setting.

        Returns:
            A `StaticEncoder`.

        Raises:
            StaticFolderError: the folder is not a readable static model.
        """
        config, arrays, tokenizer = static_runtime.read_static_folder(preset)
        pca = None
        if "pca_mean" in arrays:
            pca = (arrays["pca_mean"], arrays["pca_components"])
        known = ("format_version", "normalize", "max_length", "table_dtype", "dim",
                 "vocabulary_size")
        return cls(static_runtime.float_table(arrays), tokenizer, weights=arrays.get("weights"),
                   keep=arrays.get("keep"),
                   normalize=config.get("normalize", True) if normalize is None else normalize,
                   max_length=config.get("max_length") if max_length is None else max_length,
                   pca=pca, info={k: v for k, v in config.items() if k not in known},
                   table_dtype=config.get("table_dtype", "float32"), **kwargs)

    def get_config(self):
        # The tokenizer and table live in the folder `save` writes, not in a config.
        raise NotImplementedError("Save a StaticEncoder with `save(folder)`, not as a .keras "
                                  "archive.")

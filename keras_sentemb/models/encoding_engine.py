"""How a `SentenceEncoder` turns text into vectors: tokenizing, packing, encoding.

`EncodingEngine` is the part of `SentenceEncoder` that runs outside the
Keras graph: it cleans and tokenizes text, packs sentences into batches of
similar length (padded up to the next length, or the next even length where
the forward pass compiles a kernel per shape, or a coarser bucket past 128
tokens, so a bounded set of shapes serves every input), runs the compiled
forward pass on them, and puts
the vectors back in input order. It also streams large inputs to files and
builds the bfloat16 twin an encoder computes with on request.
"""

from concurrent.futures import ThreadPoolExecutor
import math

import keras
import numpy as np
import tensorflow as tf

from keras_sentemb.kernels.cpu_threads import check_max_batch_tokens
from keras_sentemb.kernels.cpu_threads import run_batches
from keras_sentemb.kernels.heap_trim import after_encode
from keras_sentemb.kernels.policy import compiles_per_shape
from keras_sentemb.kernels.policy import declare_graph
from keras_sentemb.models.int8_encoder import int8_target
from keras_sentemb.models.int8_encoder import prepare_int8
from keras_sentemb.kernels.precision import INFERENCE_POLICIES
from keras_sentemb.kernels.precision import check_precision
from keras_sentemb.kernels.precision import resolve_encode_precision
from keras_sentemb.models import sharded_encoding
from keras_sentemb.models.text_normalization import normalize_text
from keras_sentemb.models.truncation import check_truncate_dim
from keras_sentemb.models.truncation import truncate_embeddings
from keras_sentemb.models.weights_signature import follow_weights

# Sequence lengths that training batches are padded up to
# (`keras_sentemb.data.batching.bucket_widths`): with `jit_compile=True` each
# width met is one XLA compilation of the whole training step.
BUCKETS = (8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224,
           256, 320, 384, 448, 512)

# Sequence lengths that `encode` pads a batch up to when its forward pass calls
# an XLA-compiled kernel (the float32 tanh-approximate GELU): every even length
# up to 128, then BUCKETS' coarser steps. Each width met then costs one
# compilation of the kernel for its shape, far less than the padding it saves:
# on 26,000 wiki sentences the padding falls from 11.0 % to 2.5 % of the tokens
# and the forward passes take 8.9 % less time (145.2 -> 132.3 s on a 2-core
# AVX2 CPU) for 36 shapes instead of 11.
ENCODE_BUCKETS = tuple(range(2, 129, 2)) + tuple(b for b in BUCKETS if b > 128)
# ... and when it compiles nothing per shape (`kernels.policy.compiles_per_shape`): every
# length up to 128, where padding is only what sentences of a batch differ by
# (0.4 % of the tokens of those 26,000 sentences, against 1.9 % at even lengths).
EXACT_BUCKETS = tuple(range(2, 129)) + tuple(b for b in BUCKETS if b > 128)


def pack_tokens(tokens, body_length, start_id, end_id, pad_id, prefix=(), suffix=()):
    """Packed inputs `[start, *prefix, sentence, *suffix, end]` of a ragged batch (in graph).

    Each row keeps `body_length` tokens of its sentence; `token_ids`,
    `padding_mask` and `segment_ids` are `[B, T]`, T the longest packed row.
    Framed on the padded dense tensor: a ragged concat would transpose int64
    row indices, which oneDNN turns down with an error line in the log.
    """
    tokens = tokens[:, :body_length]
    body = tokens.to_tensor(default_value=pad_id)
    batch = tf.shape(body)[0]
    lead, tail = [start_id, *prefix], [*suffix, end_id]
    framed = tf.concat([tf.tile(tf.constant([lead], body.dtype), [batch, 1]), body,
                        tf.fill([batch, len(tail)], tf.constant(pad_id, body.dtype))], axis=1)
    positions = tf.range(tf.shape(framed)[1])[tf.newaxis, :]
    # Each position's place in the row's tail (suffix and end token), which follows its sentence.
    offset = positions - (tf.cast(tokens.row_lengths(), tf.int32)[:, tf.newaxis] + len(lead))
    in_tail = (offset >= 0) & (offset < len(tail))
    token_ids = tf.where(
        in_tail, tf.gather(tf.constant(tail, body.dtype), tf.clip_by_value(offset, 0, len(tail) - 1)),
        framed)
    return {
        "token_ids": token_ids,
        "padding_mask": tf.cast(offset < len(tail), tf.int32),
        "segment_ids": tf.zeros_like(token_ids),
    }


def bucket_length(length, buckets=ENCODE_BUCKETS):
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


def as_sentence_list(sentences):
    """`(list of str, single)`: what `encode` takes, checked; `single` for one str or bytes."""
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
    return [to_text(s, i) for i, s in enumerate(sentences)], single


class EncodingEngine:
    """Tokenizing, batching and encoding for `SentenceEncoder` (a mixin).

    It relies on the encoder's tokenizer, special-token ids, pooling and
    `head`; see `SentenceEncoder` for the public surface.
    """

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
                    autograph=False,
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

    def pack(self, tokens, max_length=None, prompt=None):
        """Truncate, frame (start token, prompt, end token) and pad a ragged batch (in graph).

        Args:
            tokens: ragged int tensor [B, None] from `tokenize`.
            max_length: int or None. Defaults to the encoder's `max_length`.
                A sentence keeps `max_length - 2` tokens; a prompt's tokens
                come on top (see `packed_length`).
            prompt: a `Prompt` (`make_prompt`) or None. Defaults to the
                encoder's own.

        Returns:
            dict with `token_ids`, `padding_mask`, `segment_ids` ([B, T], T =
            the longest packed row of this batch).
        """
        max_length = self.max_length if max_length is None else max_length
        prompt = self.prompt if prompt is None else prompt
        return pack_tokens(tokens, self.body_length(max_length, prompt), self.start_token_id,
                           self.end_token_id, self.pad_token_id,
                           () if prompt is None else prompt.prefix,
                           () if prompt is None else prompt.suffix)

    def body_length(self, max_length, prompt=None):
        """The tokens a sentence keeps at `max_length`: `max_length - 2`, less where the prompt
        (default: the encoder's) would otherwise pass the backbone's last position."""
        prompt = self.prompt if prompt is None else prompt
        extra = 0 if prompt is None else prompt.extra
        return min(int(max_length), int(self.backbone.max_sequence_length) - extra) - 2

    def packed_length(self, max_length, prompt=None):
        """The widest packed row at `max_length`: the sentence, its special tokens and the
        prompt (default: the encoder's)."""
        prompt = self.prompt if prompt is None else prompt
        return self.body_length(max_length, prompt) + 2 + (0 if prompt is None else prompt.extra)

    def preprocess(self, sentences, max_length=None, prompt=None):
        """Raw strings (tensor [B]) to packed model inputs; usable in tf.data."""
        return self.pack(self.tokenize(sentences), max_length, prompt)

    # ---------------------------------------------------------------- encode
    def _encode_fn(self, pooling, normalize, postprocess=True, int8=False):
        # Everything the trace bakes in is part of the key (a string: TF's
        # object tracking refuses dicts with tuple keys). Assigning a
        # post-processing layer, or new int8 weights, clears the cache.
        key = (f"{pooling}|{int(bool(normalize))}|{int(self.normalize)}|"
               f"{int(bool(postprocess))}|{int(bool(int8))}")
        fn = self._encode_fns.get(key)
        if fn is None:
            spec = tf.TensorSpec([None, None], tf.int32)

            @tf.function(input_signature=[spec, spec], reduce_retracing=True, autograph=False)
            def fn(token_ids, padding_mask):
                # A graph that never runs backward: fused matmul + GELU, fused
                # Transformer layers (`kernels.policy.GraphKind`).
                declare_graph(forward_only=True, int8=int8)
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
            precision: str or None. What the forward pass computes in:
                `"auto"` (the default, also `None`): bfloat16 on a CPU that
                computes it natively (AVX512-BF16, AMX), float32 elsewhere
                and on GPUs (`keras_sentemb.kernels.precision.auto_precision`;
                `KERAS_SENTEMB_PRECISION=float32` pins it for the process);
                `"float32"`; `"bfloat16"` (a copy of this encoder with its
                current weights in bfloat16, Keras' `bfloat16` policy; layer
                normalisation, pooling and outputs stay float32; a CPU
                without native bfloat16 computes float32 instead, with a
                one-line notice); `"int8"`: int8 matrix multiplies with
                ranges calibrated on `int8_calibration` sentences
                (`keras_sentemb.kernels.int8_transformer`; TensorFlow's oneDNN
                kernels must be on). Every precision returns float32 vectors.
            postprocess: bool. Apply the post-processing layer (if any);
                `False` returns the vectors it takes (what it was fitted
                on). Defaults to `True`.
            parallel_batches: int or None. Batches computed at the same time
                (on Python threads; see `keras_sentemb.kernels.cpu_threads`).
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
        precision = resolve_encode_precision(precision)
        int8 = precision == "int8"
        # The copy that computes in `precision`: this encoder when its policy is
        # that precision's, else its twin (a mixed-bfloat16 encoder in training
        # encodes `precision="float32"` through its float32 twin, so dev scores
        # and teachers' targets are float32's whatever the run trains in).
        target = int8_target(self) if int8 else self.precision_twin(precision)
        if target is not self:  # the copy that computes in `precision`
            return target.encode(
                sentences, batch_size=batch_size, max_length=max_length,
                pooling=self.pooling if pooling is None else pooling, normalize=normalize,
                show_progress=show_progress, precision=precision,  # the copy's own: itself
                postprocess=postprocess, parallel_batches=parallel_batches,
                max_batch_tokens=max_batch_tokens,
            )
        sentences, single = as_sentence_list(sentences)
        max_length = self._check_lengths(batch_size, max_length)
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
        def make_fn():  # int8: the weights calibrated first, while the sentences tokenize
            if int8:
                prepare_int8(self)
            return self._encode_fn(pooling, bool(normalize), postprocess, int8=int8)

        if show_progress is None:
            show_progress = n >= 5000
        progbar = keras.utils.Progbar(n, unit_name="sentence") if show_progress else None
        tokens, buckets, fn = self._tokenize_while_warming_up(sentences, make_fn)
        batches = self._pack(tokens, batch_size, max_length, max_batch_tokens, buckets)
        for idx, vectors in run_batches(fn, batches, parallel_batches):
            out[idx] = vectors
            if progbar is not None:
                progbar.add(len(idx))
        after_encode()  # every 100th call hands freed memory back (`kernels.heap_trim`)
        return out[0] if single else out

    def _check_lengths(self, batch_size, max_length):
        """`max_length` (the encoder's when None), after checking it and `batch_size`."""
        if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"`batch_size` must be a positive int, received {batch_size!r}.")
        max_length = self.max_length if max_length is None else max_length
        limit = int(self.backbone.max_sequence_length)
        if not isinstance(max_length, (int, np.integer)) or not 3 <= max_length <= limit:
            raise ValueError(
                f"`max_length` must be an int in [3, {limit}], received {max_length!r}."
            )
        return max_length

    def precision_twin(self, precision):
        """This encoder computing in `precision`, with its current weights.

        A copy built once per precision (`clone(dtype=...)`, with the
        inference policy of `precision`: weights stored in that precision);
        it gets this encoder's weights again at a call after they changed
        (`weights_signature.follow_weights`), so it follows training. The encoder itself when it already computes so. For
        `"int8"`, the encoder that holds the int8 weights
        (`int8_encoder.prepare_int8`: this one when it computes in float32);
        its graphs declared int8 compute in int8.
        """
        if precision == "int8":
            return prepare_int8(self)
        precision = check_precision(precision)
        policy = INFERENCE_POLICIES[precision]
        if policy == self.backbone.dtype_policy.name:
            return self
        twin = self._precision_twins.get(precision)
        if twin is None:
            twin = self.clone(name=f"{self.name}_{precision}", dtype=policy)
            self._precision_twins[precision] = twin
        follow_weights(twin, self)
        return twin

    # `encoder.encode_to_files(...)` runs `sharded_encoding.encode_to_files(encoder, ...)`.
    encode_to_files = sharded_encoding.encode_to_files

    def _tokenize_while_warming_up(self, sentences, make_fn):
        """`(tokens, widths, fn)`: `_tokenize_to_numpy(sentences)`, the forward pass `make_fn()`
        returns, and the widths to pad its batches to.

        `make_fn` runs on another thread while the main one tokenizes (for int8
        it may calibrate the int8 weights first), and so, the first time a
        forward pass is met, does its tracing and one run on an empty sentence
        (TensorFlow optimizes a graph at its first call): the start-up work of
        tokenizing and of building the forward pass overlap. The widths:
        `EXACT_BUCKETS` for a graph that compiles nothing per shape, else
        `ENCODE_BUCKETS`. An error on either thread reaches the caller, and
        nothing is cached after it.
        """
        with ThreadPoolExecutor(1, thread_name_prefix="encode-warm-up") as pool:
            ready = pool.submit(self._ready, make_fn)
            tokens = self._tokenize_to_numpy(sentences)
            fn, buckets = ready.result()
        self._warm_encode_fns[id(fn)] = (fn, buckets)  # holding `fn` keeps its id unique
        return tokens, buckets, fn

    def _ready(self, make_fn):
        """`(fn, widths)`: `make_fn()`, traced and run once the first time it is met."""
        fn = make_fn()
        known = self._warm_encode_fns.get(id(fn))
        return fn, known[1] if known is not None else self._warm_up(fn)

    def _warm_up(self, fn):
        spec = tf.TensorSpec([None, None], tf.int32)
        per_shape = compiles_per_shape(fn.get_concrete_function(spec, spec))
        empty = np.array([[self.start_token_id, self.end_token_id]], np.int32)
        fn(empty, np.ones_like(empty)).numpy()
        return ENCODE_BUCKETS if per_shape else EXACT_BUCKETS

    def packed_batches(self, sentences, batch_size, max_length, max_batch_tokens=None,
                       buckets=ENCODE_BUCKETS):
        """Yield `(indices, token_ids, padding_mask)` batches, longest first.

        All sentences are tokenized in bulk, sorted by length, and each batch
        is padded to the smallest bucket length (of `buckets`) that holds its
        longest sentence (capped at `max_length`), so a bounded set of shapes
        serves any input. A batch ends early where the next sentence's own bucket is at
        most half the batch's width: a few long outliers then make a small
        batch of their own instead of padding up to `batch_size` short
        sentences to their length. A batch also holds at most
        `max_batch_tokens // width` rows (at least one; `None`: no cap), which
        bounds its activations: wide batches get fewer rows. `indices` are
        the batch rows' positions in `sentences`.
        """
        return self._pack(self._tokenize_to_numpy(sentences), batch_size, max_length,
                          max_batch_tokens, buckets)

    def _pack(self, tokens, batch_size, max_length, max_batch_tokens, buckets):
        """`packed_batches` of tokens from `_tokenize_to_numpy`."""
        flat, offsets, lengths = tokens
        n = len(lengths)
        prompt = self.prompt
        lead = np.array([self.start_token_id, *(() if prompt is None else prompt.prefix)],
                        np.int32)
        tail = np.array([*(() if prompt is None else prompt.suffix), self.end_token_id],
                        np.int32)
        frame = len(lead) + len(tail)
        kept = np.minimum(lengths, self.body_length(max_length))
        order = np.argsort(-kept, kind="stable")
        widths = np.minimum(
            [bucket_length(k + frame, buckets) for k in range(int(kept.max(initial=0)) + 1)],
            self.packed_length(max_length),
        )[kept[order]]  # each sorted sentence's own padded width
        begin = 0
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
            token_ids[:, : len(lead)] = lead
            for row, i in enumerate(idx):
                k = kept[i]
                token_ids[row, len(lead) : len(lead) + k] = flat[offsets[i] : offsets[i] + k]
                token_ids[row, len(lead) + k : k + frame] = tail
                mask[row, : k + frame] = 1
            yield idx, token_ids, mask

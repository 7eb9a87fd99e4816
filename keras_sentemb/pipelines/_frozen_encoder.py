"""Shared steps of the post-processing fits (whitening, BERT-flow): a frozen encoder's vectors."""

import logging
import os

import numpy as np

from keras_sentemb.data.corpus import load_corpus
from keras_sentemb.data.read_errors import reading
from keras_sentemb.data.row_accounting import RowCounter
from keras_sentemb.data.row_accounting import check_counts
from keras_sentemb.data.stream_checks import check_source
from keras_sentemb.data.stream_checks import check_usable
from keras_sentemb.data.stream_batches import Mixture
from keras_sentemb.data.stream_batches import as_stream
from keras_sentemb.pipelines.callbacks import pair_sentences
from keras_sentemb.pipelines.callbacks import vectors_spearman
from keras_sentemb.kernels.precision import reproducible

logger = logging.getLogger(__name__)


def load_frozen_encoder(run, examples=None, epochs=1):
    """The run's encoder without a post-processing layer, and the run's `RunPlan` for it.

    A post-processing layer the model already has is removed (the new one
    replaces it; it is fitted on the vectors before post-processing).
    """
    encoder = run.load_encoder()
    if encoder.postprocess is not None:
        logger.info("%s: replacing the model's %s", run.method,
                    type(encoder.postprocess).__name__)
        encoder.postprocess = None
    return encoder, run.plan(encoder, examples=examples, epochs=epochs)


def frozen_vectors(plan, encoder, sentences, batch_size, verbose="auto", max_length=None):
    """The encoder's vectors of `sentences` with the plan's pooling (no post-processing).

    `max_length` defaults to the encoder's own (what it encodes with after
    the fit).
    """
    show = None if verbose == "auto" else bool(verbose)
    return encoder.encode(sentences, **reproducible(encoder.encode, dict(
        batch_size=batch_size, max_length=max_length, pooling=plan.pooling,
        show_progress=show, postprocess=False)))


class FittingData:
    """What a post-processing layer is fitted on: sentences, or their precomputed vectors.

    `data` is a corpus (see `load_corpus`) or precomputed vectors: a 2-D
    float array or a `.npy` file of one, e.g. written by `keras-sentemb
    encode --pooling P` with the same model and the run's pooling (a corpus
    encoded once serves several fits).

    Args:
        data: the `data` argument of the fit.
        limit: int or None. Keep the first `limit` rows.
        tfds: bool. Stream a TFDS name (else read it into memory).
            Defaults to `True`.
    """
    def __init__(self, data, limit=None, tfds=True):
        self.sentences = self.given_vectors = self.stream = None
        self.limit = limit
        is_npy = isinstance(data, (str, os.PathLike)) and os.fspath(data).endswith(".npy")
        if isinstance(data, np.ndarray) or is_npy:
            vectors = np.load(os.fspath(data)) if is_npy else data
            if vectors.ndim != 2 or not np.issubdtype(vectors.dtype, np.floating):
                raise ValueError(
                    "Precomputed vectors must be a 2-D float array [n, dim]; received "
                    f"{vectors.dtype} of shape {vectors.shape}."
                )
            if not np.isfinite(vectors).all():
                raise ValueError("The precomputed vectors hold NaN or infinite values.")
            self.given_vectors = np.asarray(vectors[:limit], np.float32)
            self.count = len(self.given_vectors)
            return
        stream = as_stream(data, tfds=tfds)  # a TFDS name is read into memory otherwise
        if stream is not None:
            if isinstance(stream, Mixture):
                raise ValueError("A Mixture mixes datasets batch by batch for training; fit a "
                                 "post-processing layer on one source (a glob, a list of files "
                                 "or a dataset).")
            self.stream = stream
            self.count = stream.size if limit is None or stream.size is None else min(
                stream.size, limit)
            return
        self.sentences = load_corpus(data)[:limit]
        self.count = len(self.sentences)

    def describe(self):
        """Data counts for the training report."""
        if self.stream is not None:
            return {"sentences": self.count, "streamed": repr(self.stream)}
        if self.given_vectors is None:
            return {"sentences": self.count}
        return {"vectors": self.count, "precomputed": True}

    def moments(self, run, plan, encoder, batch_size, verbose="auto"):
        """`VectorMoments` of the fitting vectors, a stream read once in batches (constant memory).

        A stream is read in its files' order, up to `limit` sentences or to
        its end; in-memory data is summarised from its vectors.
        """
        from keras_sentemb.models.whitening import VectorMoments

        moments = VectorMoments()
        if self.stream is None:
            return moments.update(self.vectors(run, plan, encoder, batch_size, verbose))
        columns = ("sentence",)
        counter = RowCounter(self.stream, columns)
        rows = self.stream.rows(columns, counter=counter)
        if self.limit is not None:
            rows = rows.take(self.limit)
        with reading(self.stream.where):
            for batch in rows.batch(batch_size).as_numpy_iterator():
                sentences = [s.decode("utf-8") for s in batch["sentence"]]
                moments.update(frozen_vectors(plan, encoder, sentences, batch_size, verbose=0,
                                              max_length=plan.max_length))
        counts = counter.counts()
        check_usable(self.stream, columns, counts)
        check_counts(self.stream, columns, counts, run.config.max_skipped)
        logger.info("%s: fitted on %d streamed sentences", run.method, moments.count)
        self.count = moments.count
        return moments

    def sample_vectors(self, run, plan, encoder, size, batch_size):
        """Vectors of a stream's first `size` sentences after its shuffle buffer (one pass).

        The first rows a shuffled run reads (seeded by the run's seed): a
        bounded sample, e.g. for a data-dependent initialisation. All of a
        stream of up to `size` sentences.
        """
        seed = run.seed or 0
        rows = self.stream.rows(("sentence",), seed=seed).shuffle(
            self.stream.options.shuffle_buffer, seed=seed).take(size)
        with reading(self.stream.where):
            sentences = [r["sentence"].decode("utf-8") for r in rows.as_numpy_iterator()]
        if not sentences:
            check_source(self.stream, ("sentence",), 1)
            raise ValueError(f"{self.stream!r} holds no sentence.")
        return frozen_vectors(plan, encoder, sentences, batch_size, verbose=0,
                              max_length=plan.max_length)

    def vectors(self, run, plan, encoder, batch_size, verbose="auto"):
        """The fitting vectors: encoded (truncated to the plan's `max_length`) or as given."""
        if self.given_vectors is None:
            return frozen_vectors(plan, encoder, self.sentences, batch_size, verbose,
                                  plan.max_length)
        if self.given_vectors.shape[1] != encoder.base_output_dim:
            raise ValueError(
                f"The precomputed vectors have {self.given_vectors.shape[1]} dimensions; the "
                f"model outputs {encoder.base_output_dim}. Encode the corpus with this model."
            )
        logger.info("%s: fitting on %d precomputed vectors (taken to be %s pooling)",
                    run.method, self.count, plan.pooling)
        return self.given_vectors


class DevVectors:
    """The run's dev pairs, their sentences' frozen vectors, and scoring of a transform."""

    def __init__(self, run, plan, encoder, batch_size=128):
        self.pairs = run.dev_pairs
        self.sentences = pair_sentences(self.pairs)
        self.vectors = frozen_vectors(plan, encoder, self.sentences, batch_size, verbose=0)

    def spearman(self, transform=None):
        """Spearman x100 of the dev pairs' cosines after `transform` (a layer or None)."""
        vectors = self.vectors if transform is None else transform(self.vectors)
        return vectors_spearman(vectors, self.sentences, self.pairs)


class DevRetrievalVectors:
    """The run's retrieval dev set (`dev_retrieval`) as frozen vectors, and nDCG@10 of a transform.

    The queries and documents are encoded once (the plan's pooling, no
    post-processing); a post-processing candidate (a whitening or flow
    layer) is scored by applying it to those vectors and ranking exactly as
    `evaluate_retrieval` does.
    """

    def __init__(self, run, plan, encoder, batch_size=128):
        from keras_sentemb.evaluation.beir import document_text

        self.data = run.dev_retrieval_data
        queries = [self.data.queries[q] for q in self.data.queries]
        documents = [document_text(self.data.corpus[d]) for d in self.data.corpus]
        self.query_vectors = frozen_vectors(plan, encoder, queries, batch_size, verbose=0)
        self.document_vectors = frozen_vectors(plan, encoder, documents, batch_size, verbose=0)

    def ndcg(self, transform=None):
        """nDCG@10 x100 of the dev set after `transform` (a layer or None)."""
        from keras_sentemb.evaluation.beir import evaluate_retrieval

        def apply(vectors):
            return np.asarray(vectors if transform is None else transform(vectors), np.float32)

        queries = apply(self.query_vectors)
        result = evaluate_retrieval(
            lambda texts: queries, self.data, batch_size=max(1, len(queries)),
            corpus_embeddings=apply(self.document_vectors), show_progress=False,
        )
        return float(result["ndcg@10"])

"""A run's training data: sentences read, and `make_dataset(start_step)` of tokenized batches."""

from keras_sentemb.data.batching import shuffled_batches
from keras_sentemb.data.batching import tokenize_columns
from keras_sentemb.data.batching import with_text_views
from keras_sentemb.data.corpus import load_corpus
from keras_sentemb.data.stream_batches import as_stream
from keras_sentemb.data.stream_batches import stream_batches
from keras_sentemb.data.stream_batches import worker_shard


class RunData:
    """`read_sentences`, `batches` and `stream_batches` of `FitScaffold` (a mixin).

    Reads the run's `config` (`batch_size`, `seed`, `strategy`) and records
    data counts with `record_data`.
    """

    def read_sentences(self, data):
        """`(sentences, stream, count)` of a corpus of sentences, recorded in the report.

        A list or a small local file is read into a list (`load_corpus`;
        `stream` is None); a glob, a large or remote file, `streamed(...)`, a
        `Mixture`, a `tf.data.Dataset` or a TFDS name streams (`sentences`
        is None, `count` None when the size is unknown). See `as_stream`.
        """
        stream = as_stream(data, tfds=True)
        if stream is None:
            sentences = load_corpus(data)
            self.record_data(sentences=len(sentences))
            return sentences, None, len(sentences)
        self.record_data(sentences=stream.size, streamed=repr(stream))
        return None, stream, stream.size


    def batches(self, encoder, columns, plan, extra=None, encoders=None, max_length=None,
                text_views=None):
        """A `make_dataset(start_step)` of tokenized, shuffled batches.

        Args:
            encoder: `SentenceEncoder` that tokenizes the columns.
            columns: dict name -> list of str (aligned rows).
            plan: `RunPlan`. Its `max_length` cuts the batches.
            extra: dict name -> list of numbers passed through (labels).
            encoders: dict column -> encoder for columns another encoder
                tokenizes.
            max_length: int or None. Defaults to the plan's.
            text_views: dict new column -> `(source column, fn(texts, key))`
                or None: views of the texts made before tokenization (see
                `keras_sentemb.data.batching.with_text_views`), tokenized
                as columns of their own.
        """
        max_length = plan.max_length if max_length is None else max_length

        def make_dataset(start_step):
            ds = shuffled_batches(
                columns, self.config.batch_size, seed=self.config.seed or 0,
                start_step=start_step, extra=extra,
            )
            return self._tokenized(encoder, ds, list(columns), max_length, encoders,
                                   text_views, start_step)

        return make_dataset

    def stream_batches(self, encoder, stream, names, plan, no_duplicates=False, max_length=None,
                       encoders=None, exclude=None, labels=None, text_views=None):
        """A `make_dataset(start_step)` of tokenized batches read from a stream.

        See `keras_sentemb.data.stream_batches`: shuffle buffer, no
        duplicate texts in a batch, mixing, sharding, and a resumed run
        skipping the batches it has trained on.

        Args:
            encoder: `SentenceEncoder` that tokenizes the columns.
            stream: a stream source or `Mixture`.
            names: tuple of str. The columns, in the trainer's order.
            plan: `RunPlan`. Its `max_length` cuts the batches.
            no_duplicates: bool. The method's default (its loss is in-batch).
            max_length: int or None. Defaults to the plan's.
            encoders: dict column -> encoder for columns another encoder
                tokenizes.
            exclude: dict column -> texts left out of training (held out).
            labels: dict column -> label parser (see
                `keras_sentemb.data.labeled_streams`): numbers read beside
                the text, passed through untokenized.
            text_views: see `batches`.
        """
        max_length = plan.max_length if max_length is None else max_length
        workers = worker_shard(self.config.strategy)

        def make_dataset(start_step):
            ds = stream_batches(stream, names, self.config.batch_size,
                                seed=self.config.seed or 0, start_step=start_step,
                                no_duplicates=no_duplicates, workers=workers, exclude=exclude,
                                labels=labels)
            return self._tokenized(encoder, ds, list(names), max_length, encoders, text_views,
                                   start_step)

        return make_dataset

    def sentence_batches(self, encoder, sentences, stream, plan, no_duplicates=False,
                         text_views=None, encoders=None):
        """`make_dataset` of one `"sentence"` column, from `read_sentences`'s `(sentences, stream)`.

        `stream_batches` when the corpus streams, else `batches` of the
        list; `no_duplicates` applies to a stream (a list's batches are its
        shuffled rows), `text_views` and `encoders` as in `batches`.
        """
        if stream is not None:
            return self.stream_batches(encoder, stream, ("sentence",), plan,
                                       no_duplicates=no_duplicates, text_views=text_views,
                                       encoders=encoders)
        return self.batches(encoder, {"sentence": sentences}, plan, text_views=text_views,
                            encoders=encoders)

    def _tokenized(self, encoder, ds, names, max_length, encoders, text_views, start_step):
        """`ds` with its text views added, then every text column tokenized."""
        if text_views:
            ds = with_text_views(ds, text_views, self.config.seed or 0, start_step)
            names = names + sorted(text_views)
        return tokenize_columns(encoder, ds, names, max_length, encoders)

"""Tokenizing text inside tf.data, padded per batch, prefetched."""

import tensorflow as tf


def tokenize_columns(encoder, dataset, columns, max_length=None):
    """Map a dataset of string batches to packed model inputs per column.

    Args:
        encoder: `SentenceEncoder` whose tokenizer and packing are used.
        dataset: `tf.data.Dataset` whose elements are dicts (or tuples) of
            string tensors of shape [batch], already batched.
        columns: list of keys (or tuple indices) to tokenize; other entries
            pass through unchanged.
        max_length: int or None. Defaults to the encoder's `max_length`.

    Returns:
        A dataset of dicts `{column: {"token_ids", "padding_mask",
        "segment_ids"}, ...}`, each padded to its own batch maximum,
        prefetched.
    """

    def pack(element):
        if isinstance(element, dict):
            out = dict(element)
            for key in columns:
                out[key] = encoder.preprocess(element[key], max_length)
            return out
        element = list(element)
        return tuple(
            encoder.preprocess(x, max_length) if i in columns else x
            for i, x in enumerate(element)
        )

    return dataset.map(pack, num_parallel_calls=tf.data.AUTOTUNE).prefetch(
        tf.data.AUTOTUNE
    )

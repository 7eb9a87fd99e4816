"""tf.data builders: corpora, pairs, samplers, length buckets; bundled data."""

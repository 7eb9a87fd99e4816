"""Tokenized training batches of the shared sentences, as each trainer's `train_step` takes them."""

from tests.helpers.corpora import SENTENCES, STS_PAIRS, TRIPLETS

TRIPLET_COLUMNS = ("sent0", "sent1", "hard_neg")


def packed(encoder, sentences=SENTENCES):
    """`sentences` tokenized and packed to 16 tokens."""
    import tensorflow as tf

    return encoder.preprocess(tf.constant(sentences), 16)


def triplet_batch(encoder, rows=TRIPLETS):
    """Supervised SimCSE's batch: the (anchor, positive, hard negative) columns of `rows`."""
    import tensorflow as tf

    return {k: encoder.preprocess(tf.constant([t[i] for t in rows]), 16)
            for i, k in enumerate(TRIPLET_COLUMNS)}


def paraphrase_batch(encoder):
    """A labelled paraphrase batch: `TRIPLETS`' first two columns, labels 0, 1, 0, 1."""
    import tensorflow as tf

    rows = [(a, b, i % 2) for i, (a, b, _) in enumerate(TRIPLETS)]
    return {
        "sentence1": encoder.preprocess(tf.constant([r[0] for r in rows]), 16),
        "sentence2": encoder.preprocess(tf.constant([r[1] for r in rows]), 16),
        "label": tf.constant([r[2] for r in rows]),
    }


def pair_batch(encoder, pairs=STS_PAIRS, lower=0.4):
    """STS regression's batch: both sentences of `pairs`, scores mapped from `lower` up."""
    import tensorflow as tf

    from keras_sentemb.methods.sts_regression import map_scores

    return {
        "sentence1": encoder.preprocess(tf.constant([p[0] for p in pairs]), 16),
        "sentence2": encoder.preprocess(tf.constant([p[1] for p in pairs]), 16),
        "label": tf.constant(map_scores([p[2] for p in pairs], lower)),
    }


def translation_batch(trainer, pairs):
    """`ParallelContrastive`'s batch: sources for the teacher, targets for the student."""
    import tensorflow as tf

    return {
        "source": trainer.teacher.preprocess(tf.constant([a for a, _ in pairs])),
        "target": trainer.student.preprocess(tf.constant([b for _, b in pairs])),
    }

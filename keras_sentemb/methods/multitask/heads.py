"""The task heads of `MultitaskModel`: sentiment, paraphrase and similarity on one encoder.

`MultitaskHeads` is the part of `MultitaskModel` that maps sentence vectors
to the three tasks' outputs and losses (the layers themselves are created in
`MultitaskModel.__init__`): the heads' variables and their groups, the
forward passes and the per-task masked losses.
"""

import tensorflow as tf

from keras_sentemb.data.multitask import TASKS
from keras_sentemb.losses.multitask import paraphrase_classification_loss
from keras_sentemb.losses.multitask import sentiment_classification_loss
from keras_sentemb.losses.multitask import similarity_regression_loss


def _join_pairs(first, second):
    """Pad two packed batches to one length and stack them: `[a; b]`."""
    length = tf.maximum(tf.shape(first["token_ids"])[1], tf.shape(second["token_ids"])[1])
    out = {}
    for key in first:
        parts = [
            tf.pad(x[key], [[0, 0], [0, length - tf.shape(x[key])[1]]])
            for x in (first, second)
        ]
        out[key] = tf.concat(parts, axis=0)
    return out


class MultitaskHeads:
    """Forward passes and losses of `MultitaskModel`'s task heads (a mixin)."""

    def head_variables(self):
        """Trainable variables of the heads (not the encoder), deduplicated."""
        seen = {id(v) for v in self.encoder.trainable_variables}
        out = []
        for v in self.trainable_variables:
            if id(v) not in seen:
                seen.add(id(v))
                out.append(v)
        return out

    def head_groups(self):
        """`[(tasks, variables)]`: the head variables grouped by the tasks using them.

        A variable belongs to the group of exactly the tasks whose loss it
        takes part in (the shared first layer of `head_sharing="first_layer"`:
        paraphrase and similarity). Each group has its own optimizer and is
        updated at the steps where one of its tasks is trained.
        """
        pair_first = ("paraphrase", "similarity") if self.head_sharing != "none" else None
        pair_second = ("paraphrase", "similarity") if self.head_sharing == "full" else None
        owners = [
            (self.sentiment_hidden.trainable_variables, ("sentiment",)),
            (self.sentiment_output.trainable_variables, ("sentiment",)),
            (self.paraphrase_first.trainable_variables, pair_first or ("paraphrase",)),
            (self.similarity_first.trainable_variables, pair_first or ("similarity",)),
            (self.paraphrase_second.trainable_variables, pair_second or ("paraphrase",)),
            (self.similarity_second.trainable_variables, pair_second or ("similarity",)),
            ([self.bilinear, self.bilinear_bias], ("paraphrase",)),
        ]
        order = [("sentiment",), ("paraphrase",), ("similarity",), ("paraphrase", "similarity")]
        groups = {tasks: [] for tasks in order}
        seen = set()
        for variables, tasks in owners:
            for v in variables:
                if id(v) not in seen:
                    seen.add(id(v))
                    groups[tasks].append(v)
        return [(tasks, groups[tasks]) for tasks in order if groups[tasks]]

    def embed(self, inputs, training=False):
        """Sentence vectors the heads read: the encoder's, with `pooling`.

        The encoder's own normalisation (if it declares one) applies, so
        training sees the vectors `encode` returns.
        """
        return self.encoder.sentence_vectors(
            inputs, self.pooling, training=training, normalize=self.encoder.normalize
        )

    def call(self, inputs, training=False):
        """Sentence vectors of packed inputs (see `embed`)."""
        return self.embed(inputs, training=training)

    def sentiment_logits(self, embeddings, training=False):
        x = self.sentiment_dropout(embeddings, training=training)
        x = self.sentiment_hidden(x)
        x = self.sentiment_dropout(x, training=training)
        return tf.cast(self.sentiment_output(x), "float32")

    def _transform(self, x, task, training):
        first = self.paraphrase_first if task == "paraphrase" else self.similarity_first
        second = self.paraphrase_second if task == "paraphrase" else self.similarity_second
        if self.head_style == "plain":
            hidden = self.pair_dropout(first(self.pair_dropout(x, training=training)),
                                       training=training)
            return tf.cast(second(hidden), "float32")
        hidden = self.pair_dropout(first(x), training=training)
        return tf.cast(x, "float32") + tf.cast(second(hidden), "float32")

    def paraphrase_logits(self, u, v, training=False):
        tu = self._transform(u, "paraphrase", training)
        tv = self._transform(v, "paraphrase", training)
        bilinear = tf.cast(self.bilinear, "float32")
        return tf.reduce_sum(tf.matmul(tu, bilinear) * tv, axis=-1) + tf.cast(
            self.bilinear_bias, "float32"
        )

    def similarity_vectors(self, u, v, training=False):
        """The similarity head's transformed vectors of both sentences."""
        return self._transform(u, "similarity", training), self._transform(v, "similarity", training)

    def similarity_cosine(self, u, v, training=False):
        tu, tv = self.similarity_vectors(u, v, training)
        tu = tf.math.l2_normalize(tu, -1, 1e-12)
        tv = tf.math.l2_normalize(tv, -1, 1e-12)
        return tf.reduce_sum(tu * tv, axis=-1)

    # ---------------------------------------------------------------- losses
    def task_losses(self, data, training=True):
        """Per-task masked losses of one multitask batch.

        Args:
            data: a `tokenize_multitask` element (every task, with masks).
            training: bool. Dropout on.

        Returns:
            `(losses, metrics)`: `{task: float32 scalar}` (0 for a task
            whose mask is all 0) and `{"sentiment_accuracy": ...}`.
        """
        losses = {}
        batch = data["sentiment"]
        logits = self.sentiment_logits(self.embed(batch["sentence"], training), training)
        losses["sentiment"], accuracy = sentiment_classification_loss(
            logits, batch["label"], batch["mask"]
        )
        for task in ("paraphrase", "similarity"):
            batch = data[task]
            n = tf.shape(batch["sentence1"]["token_ids"])[0]
            both = self.embed(_join_pairs(batch["sentence1"], batch["sentence2"]), training)
            u, v = both[:n], both[n:]
            if task == "paraphrase":
                losses[task] = paraphrase_classification_loss(
                    self.paraphrase_logits(u, v, training), batch["label"], batch["mask"]
                )
            else:
                tu, tv = self.similarity_vectors(u, v, training)
                losses[task] = similarity_regression_loss(tu, tv, batch["label"], batch["mask"])
        return losses, {"sentiment_accuracy": accuracy}

    @staticmethod
    def active_tasks(data):
        """`{task: bool scalar}`: whether the batch trains that task."""
        return {t: tf.reduce_any(data[t]["mask"] > 0) for t in TASKS}

    @staticmethod
    def _mean_of_active(losses, active):
        count = tf.add_n([tf.cast(active[t], "float32") for t in TASKS])
        return tf.add_n([losses[t] for t in TASKS]) / tf.maximum(count, 1.0)

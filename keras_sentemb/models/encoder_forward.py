"""The forward pass of `SentenceEncoder`: hidden states, views, pooling and head."""

import keras
import tensorflow as tf

from keras_sentemb.augment.views import apply_embedding_view
from keras_sentemb.augment.views import apply_position_view
from keras_sentemb.models.pooling import MASK_POOLING
from keras_sentemb.models.pooling import parse_pooling
from keras_sentemb.models.pooling import pool_hidden_states


class EncoderForward:
    """`forward`, `sentence_vectors`, `pool` and `head` of `SentenceEncoder` (a mixin).

    Reads the encoder's `adapter` (the backbone's layers), `projection`,
    `normalize`, `pooling`, `num_layers` and `postprocess`.
    """

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
        pooling = self._resolve_pooling(pooling)
        if pooling == MASK_POOLING:  # where the prompt puts its [MASK] (checked when set)
            self._check_mask_pooling(pooling, self.prompt_template)
            pooling = f"token:{self.prompt.mask_index}"
        return pool_hidden_states(hidden_states, padding_mask, pooling)

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

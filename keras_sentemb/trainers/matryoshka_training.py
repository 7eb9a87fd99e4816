"""Matryoshka training for `BaseTrainer`: the method's loss on nested prefixes of its vectors."""

from keras_sentemb.losses.matryoshka import MatryoshkaLoss


class MatryoshkaMixin:
    """`set_matryoshka` and what it asks of a trainer (a mixin of `BaseTrainer`).

    The wrapped loss is kept in the trainer's `matryoshka` attribute (None:
    off), which `BaseTrainer.embeddings_loss` calls instead of
    `loss_from_embeddings`.
    """

    def set_matryoshka(self, dims, weights=None):
        """Train with the method's loss summed over the first `d` dimensions, `d` in `dims`.

        Wraps `loss_from_embeddings` in a `MatryoshkaLoss` (see
        `keras_sentemb.losses.matryoshka`); `None` turns it off.

        Args:
            dims: sequence of int or None. Prefix sizes, each at most the
                encoder's `output_dim`.
            weights: sequence of float or None. One weight per size.
                Defaults to 1 each.
        """
        if dims is None:
            self.matryoshka = None
            return
        reason = self.matryoshka_unsupported()
        if reason:
            raise ValueError(f"matryoshka_dims is not available here: {reason}.")
        self.matryoshka = MatryoshkaLoss(self.matryoshka_base_loss(), dims, weights,
                                         full_dim=self.encoder.output_dim)

    def matryoshka_base_loss(self):
        """The loss a Matryoshka loss wraps: `loss_from_embeddings`."""
        return self.loss_from_embeddings

    def matryoshka_unsupported(self):
        """Why a Matryoshka loss cannot wrap this trainer's loss, or None."""
        if not self._splits_loss():
            return f"{type(self).__name__} does not compute its loss from sentence embeddings"
        for name in ("mlp", "target_mlp", "source_mlp"):
            if getattr(self, name, None) is not None:
                return ("the loss compares the training-only projection head's outputs, not the "
                        "encoder's vectors; train with mlp='none'")
        return None

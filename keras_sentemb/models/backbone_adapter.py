"""`BackboneAdapter`: where BERT and RoBERTa backbones differ, in one place.

keras-hub's `BertBackbone` keeps its token, position and segment embeddings
as separate layers joined by an `Add`; `RobertaBackbone` (and
`XLMRobertaBackbone`) has one `TokenAndPositionEmbedding` and no segments.
Everything else the encoder needs (embedding LayerNorm and dropout, the
Transformer layers) has the same name in both. The adapter exposes that
common surface so no other module has to ask which family it holds.
"""

import tensorflow as tf

from keras_sentemb import validation

FAMILIES = ("bert", "roberta")


class BackboneAdapter:
    """A uniform view of a keras-hub BERT or RoBERTa backbone.

    Args:
        backbone: `keras_hub.models.BertBackbone` or
            `keras_hub.models.RobertaBackbone` (or a subclass, e.g.
            `XLMRobertaBackbone`).

    Examples:

    ```python
    adapter = BackboneAdapter(encoder.backbone)
    x = adapter.embed(token_ids)          # after the embedding LayerNorm
    for layer in adapter.transformer_layers:
        x = layer(x, padding_mask=mask)
    ```
    """
    def __init__(self, backbone):
        self.backbone = backbone
        if hasattr(backbone, "embeddings") and hasattr(
            backbone.embeddings, "token_embedding"
        ):
            self.family = "roberta"
            self.token_embedding = backbone.embeddings.token_embedding
            self.position_embedding = backbone.embeddings.position_embedding
            self.segment_embedding = None
        elif hasattr(backbone, "token_embedding") and hasattr(
            backbone, "position_embedding"
        ):
            self.family = "bert"
            self.token_embedding = backbone.token_embedding
            self.position_embedding = backbone.position_embedding
            self.segment_embedding = getattr(backbone, "segment_embedding", None)
        else:
            raise ValueError(
                "Expected a keras-hub BERT or RoBERTa backbone (token, position "
                "and optional segment embeddings, an embedding LayerNorm and "
                f"`transformer_layers`). Received: {type(backbone).__name__}."
            )
        for name in ("embeddings_layer_norm", "embeddings_dropout", "transformer_layers"):
            if not hasattr(backbone, name):
                raise ValueError(
                    f"{type(backbone).__name__} has no `{name}`; only keras-hub "
                    "BERT and RoBERTa backbones are supported."
                )

    @property
    def layer_norm(self):
        return self.backbone.embeddings_layer_norm

    @property
    def dropout(self):
        return self.backbone.embeddings_dropout

    @property
    def transformer_layers(self):
        return self.backbone.transformer_layers

    @property
    def pooler(self):
        """BERT's `[CLS] -> dense -> tanh` pooler, or None (RoBERTa)."""
        return getattr(self.backbone, "pooled_dense", None)

    def embed(self, token_ids, segment_ids=None, position_ids=None):
        """The embedding output after the embedding LayerNorm, before dropout.

        Args:
            token_ids: int tensor `[B, T]`.
            segment_ids: int tensor `[B, T]` or None (zeros; ignored by
                RoBERTa, which has no segments).
            position_ids: int tensor `[B, T]` or None (`0..T-1`).

        Returns:
            Tensor `[B, T, hidden_dim]` in the backbone's compute dtype.
        """
        tokens = self.token_embedding(token_ids)
        positions = self.position_embedding(tokens, positions=position_ids)
        if self.segment_embedding is None:
            x = tokens + positions
        else:
            if segment_ids is None:
                segment_ids = tf.zeros_like(token_ids)
            segments = self.segment_embedding(segment_ids)
            x = self.backbone.embeddings_add((tokens, positions, segments))
        return self.layer_norm(x)

    def embedding_block_layers(self):
        """The layers of the embedding block (frozen by SG's BERT_T)."""
        if self.family == "roberta":
            layers = [self.backbone.embeddings]
        else:
            layers = [self.token_embedding, self.position_embedding]
            if self.segment_embedding is not None:
                layers.append(self.segment_embedding)
        layers.append(self.layer_norm)
        return layers


def truncate_backbone(backbone, num_layers):
    """A new backbone with the first `num_layers` Transformer layers of `backbone`.

    Built from the backbone's own config with `num_layers` changed; the
    embedding block, the first `num_layers` layers (and BERT's pooler) get
    copies of the original weights. The result is a smaller, faster encoder
    of the same family; it saves, loads and exports like any other.

    Args:
        backbone: a keras-hub BERT or RoBERTa backbone.
        num_layers: int in `[1, len(backbone.transformer_layers)]`.

    Returns:
        A new backbone of the same class.
    """
    total = len(backbone.transformer_layers)
    num_layers = validation.positive_int(num_layers, "num_layers")
    if num_layers > total:
        raise ValueError(
            f"`num_layers` must be in [1, {total}] for this model (it has {total} "
            f"Transformer layers). Received: num_layers={num_layers}."
        )
    config = backbone.get_config()
    config["num_layers"] = num_layers
    smaller = type(backbone).from_config(config)
    kept = {layer.name for layer in smaller.layers}
    for layer in backbone.layers:
        if layer.name in kept and layer.weights:
            smaller.get_layer(layer.name).set_weights(layer.get_weights())
    return smaller

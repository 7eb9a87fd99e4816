"""View registry and the small protocol trainers use to apply views.

Every view is a Keras layer with three class attributes that tell a trainer
where and how to call it:

- `stage`: `"positions"` or `"embeddings"`.
    - `"positions"` (`TokenShuffle`): called on the position ids before the
      embedding layer, `view(position_ids, padding_mask=..., training=...)`,
      returning position ids.
    - `"embeddings"` (all others): called on the embedding output (after the
      embedding LayerNorm), `view(embeddings, padding_mask=...,
      training=...)`, returning embeddings.
- `updates_mask`: `True` when an embeddings view also changes the padding
  mask (`SpanCutoff`); it then returns `(embeddings, padding_mask)` and the
  encoder must use the returned mask for attention and pooling.
- `requires_gradients`: `True` only for `AdversarialPerturbation`, which is
  called with the gradient of a first pass (`view(embeddings, gradients,
  ...)`) and is therefore not in the registry.

A trainer does not need to look at these attributes itself: it can call
`apply_position_view` at the position-id hook and `apply_embedding_view` at
the embedding-output hook of the encoder for any registry view; each returns
its input unchanged when the view belongs to the other stage.

```python
view = make_view("shuffle")                  # or "feature_cutoff", ...
position_ids = apply_position_view(view, position_ids, padding_mask, training=True)
embeddings, padding_mask = apply_embedding_view(
    view, embeddings, padding_mask, training=True
)
```

Registry names and default arguments. ConSERT's best unsupervised pair is
`"feature_cutoff"` (rate 0.2) + `"shuffle"`; ConSERT's scripts set the other
rates per run, so their defaults here are common choices:

| name | layer | defaults |
| --- | --- | --- |
| `"none"` | `IdentityView` | |
| `"shuffle"` | `TokenShuffle` | `keep_special=False` |
| `"token_cutoff"` | `TokenCutoff` | `rate=0.15` |
| `"feature_cutoff"` | `FeatureCutoff` | `rate=0.2` |
| `"span_cutoff"` | `SpanCutoff` | `rate=0.1, mode="keep"` |
| `"dropout"` | `EmbeddingDropout` | `rate=0.2, mode="bernoulli"` |
| `"dropout_exact"` | `EmbeddingDropout` | `rate=0.2, mode="exact"` (ConSERT's code) |
"""

from keras_sentemb.augment.embedding_dropout import EmbeddingDropout
from keras_sentemb.augment.feature_cutoff import FeatureCutoff
from keras_sentemb.augment.identity_view import IdentityView
from keras_sentemb.augment.span_cutoff import SpanCutoff
from keras_sentemb.augment.token_cutoff import TokenCutoff
from keras_sentemb.augment.token_shuffle import TokenShuffle

# name -> (layer class, default constructor arguments)
VIEW_REGISTRY = {
    "none": (IdentityView, {}),
    "shuffle": (TokenShuffle, {"keep_special": False}),
    "token_cutoff": (TokenCutoff, {"rate": 0.15}),
    "feature_cutoff": (FeatureCutoff, {"rate": 0.2}),
    "span_cutoff": (SpanCutoff, {"rate": 0.1, "mode": "keep"}),
    "dropout": (EmbeddingDropout, {"rate": 0.2, "mode": "bernoulli"}),
    # ConSERT's own implementation: exactly int(rate * tokens * hidden) elements, no rescaling.
    "dropout_exact": (EmbeddingDropout, {"rate": 0.2, "mode": "exact"}),
}

VIEW_NAMES = tuple(VIEW_REGISTRY)

STAGES = ("positions", "embeddings")


def make_view(view, /, **kwargs):
    """Creates the view layer registered under the name `view`.

    Keyword arguments override the registry defaults (see the module
    docstring). Arguments whose value is `None` are ignored, so a trainer can
    pass e.g. `rate=None` to every view and get the defaults; `seed` is
    accepted by every view except `"none"`, where it is ignored.

    Args:
        view: str (positional only). One of `"none"`, `"shuffle"`,
            `"token_cutoff"`, `"feature_cutoff"`, `"span_cutoff"`,
            `"dropout"`, `"dropout_exact"`.
        **kwargs: constructor arguments of the view layer (`rate`, `mode`,
            `keep_special`, `seed`, and the layer's `name`, ...).

    Returns:
        A new `keras.layers.Layer` following the view protocol.

    Examples:

    >>> view = make_view("feature_cutoff", rate=0.1, seed=1)
    >>> type(view).__name__, view.rate, view.stage
    ('FeatureCutoff', 0.1, 'embeddings')

    References:
        - [Yan et al., 2021. ConSERT: A Contrastive Framework for
          Self-Supervised Sentence Representation Transfer](
          https://arxiv.org/abs/2105.11741).
    """
    if not isinstance(view, str) or view not in VIEW_REGISTRY:
        raise ValueError(
            f"Unknown view name. Expected one of {list(VIEW_NAMES)}. "
            f"Received: {view!r}."
        )
    cls, defaults = VIEW_REGISTRY[view]
    kwargs = {key: value for key, value in kwargs.items() if value is not None}
    if cls is IdentityView:
        kwargs.pop("seed", None)
    unknown = sorted(set(kwargs) - _accepted_arguments(cls, defaults))
    if unknown:
        raise ValueError(
            f"View {view!r} ({cls.__name__}) does not take the arguments "
            f"{unknown}. Expected a subset of "
            f"{sorted(_accepted_arguments(cls, defaults))}. "
            f"Received: {kwargs}."
        )
    return cls(**{**defaults, **kwargs})


def parse_view_pair(views, extra=()):
    """Two view names (a pair or `"a,b"`) from the registry (or `extra`) -> a tuple of two.

    Args:
        views: a pair of names or one string `"a,b"`.
        extra: tuple of str. Names a trainer accepts beyond the registry's
            (ConSERT's `"adversarial"`).

    Raises:
        ValueError: one line naming the valid names, unless there are two of them.
    """
    if isinstance(views, str):
        views = [v.strip() for v in views.split(",")]
    views = tuple(views) if views is not None else ()
    valid = VIEW_NAMES + tuple(extra)
    if len(views) != 2 or any(v not in valid for v in views):
        raise ValueError(
            f"`views` must be two view names from {list(valid)} (a pair or "
            f"'a,b'). Received: {views!r}."
        )
    return views


def parse_view_rates(view_rates):
    """`view_rates` (None, `"0.1,none"` or a pair) -> a pair of float or None (the view's default).

    Raises:
        ValueError: one line, unless there are two rates, each None or in [0, 1].
    """
    if view_rates is None:
        return (None, None)
    try:
        if isinstance(view_rates, str):
            rates = tuple(None if r.strip().lower() == "none" else float(r)
                          for r in view_rates.split(","))
        else:
            rates = tuple(None if r is None else float(r) for r in view_rates)
    except (TypeError, ValueError):
        rates = ()
    if len(rates) != 2 or any(r is not None and not 0.0 <= r <= 1.0 for r in rates):
        raise ValueError("`view_rates` must be two rates in [0, 1] or `none` (a pair or "
                         f"'0.1,none'). Received: {view_rates!r}.")
    return rates


def make_view_pair(views, view_rates=None, seed=None, extra=()):
    """The two view layers of `views` at `view_rates` (seeds `seed` and `seed + 1`).

    A name of `extra` (a view the trainer builds itself, such as ConSERT's
    `"adversarial"`) gives None in its place.
    """
    return [None if name in extra else make_view(name, rate=rate,
                                                 seed=None if seed is None else seed + i)
            for i, (name, rate) in enumerate(zip(parse_view_pair(views, extra),
                                                  parse_view_rates(view_rates)))]


def _accepted_arguments(cls, defaults):
    base = {"name", "dtype", "trainable"}
    if cls is IdentityView:
        return base
    return base | set(defaults) | {"seed"}


def apply_position_view(view, position_ids, padding_mask=None, training=None):
    """Applies `view` at the position-id hook; other views pass through.

    Args:
        view: a view layer (or `None` for no view).
        position_ids: int tensor `[batch, seq_len]`.
        padding_mask: tensor `[batch, seq_len]`, 1 for real tokens.
            Defaults to `None`.
        training: bool. Defaults to `None` (views are then the identity).

    Returns:
        The position ids to feed the position embedding.
    """
    if view is None or _stage_of(view) != "positions":
        return position_ids
    return view(position_ids, padding_mask=padding_mask, training=training)


def apply_embedding_view(view, embeddings, padding_mask=None, training=None):
    """Applies `view` at the embedding-output hook; other views pass through.

    Args:
        view: a view layer (or `None` for no view).
        embeddings: float tensor `[batch, seq_len, hidden]`, the embedding
            output after LayerNorm.
        padding_mask: tensor `[batch, seq_len]`, 1 for real tokens.
            Defaults to `None`.
        training: bool. Defaults to `None` (views are then the identity).

    Returns:
        A tuple `(embeddings, padding_mask)`; the mask is the given one unless
        the view updates it (`SpanCutoff`).
    """
    if view is None or _stage_of(view) != "embeddings":
        return embeddings, padding_mask
    if getattr(view, "requires_gradients", False):
        raise ValueError(
            f"{type(view).__name__} needs the gradient of a first pass; call "
            "it directly as `view(embeddings, gradients, ...)` instead of "
            "through apply_embedding_view."
        )
    outputs = view(embeddings, padding_mask=padding_mask, training=training)
    if getattr(view, "updates_mask", False):
        return outputs
    return outputs, padding_mask


def _stage_of(view):
    stage = getattr(view, "stage", None)
    if stage not in STAGES:
        raise ValueError(
            "A view must have a `stage` attribute in "
            f"{list(STAGES)}. Received: {type(view).__name__} with "
            f"stage={stage!r}."
        )
    return stage

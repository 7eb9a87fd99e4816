"""The base class of the random embedding views in `keras_sentemb.augment`.

Nothing here is public API. `RandomEmbeddingView` holds what the cutoff and
dropout layers share: the `rate` / `mode` / `seed` constructor arguments and
their validation, the seed generator, the rank check and the identity at
inference, the output shape and the config. Each subclass keeps its own
registered name, defaults and docstring, and implements `_augment`.
"""

import keras

from keras_sentemb.augment import _utils


class RandomEmbeddingView(keras.layers.Layer):
    """A seeded view on the embedding output, cutting a fraction `rate` of it.

    Subclasses with a `mode` argument list its accepted values in `MODES`;
    `mode` is then validated, stored and written to the config between
    `rate` and `seed`. `call` checks that `embeddings` is of rank 3 and
    returns it unchanged when not training or when `rate` is 0; otherwise it
    returns `self._augment(embeddings, padding_mask)`.
    """

    stage = "embeddings"
    updates_mask = False
    requires_gradients = False
    MODES = ()

    def __init__(self, rate, mode=None, seed=None, **kwargs):
        kwargs.setdefault("autocast", False)
        super().__init__(**kwargs)
        name = type(self).__name__
        self.rate = _utils.validate_rate(rate, name)
        if self.MODES:
            if mode not in self.MODES:
                raise ValueError(
                    f"`mode` of {name} must be one of {list(self.MODES)}. "
                    f"Received: mode={mode!r}."
                )
            self.mode = mode
        self.seed = _utils.validate_seed(seed, name)
        self.seed_generator = keras.random.SeedGenerator(seed)

    def call(self, embeddings, padding_mask=None, training=None):
        _utils.check_embeddings(embeddings, type(self).__name__)
        if not training or self.rate == 0.0:
            return embeddings
        return self._augment(embeddings, padding_mask)

    def _augment(self, embeddings, padding_mask):
        raise NotImplementedError

    def compute_output_shape(self, embeddings_shape, padding_mask_shape=None):
        return embeddings_shape

    def get_config(self):
        config = super().get_config()
        config["rate"] = self.rate
        if self.MODES:
            config["mode"] = self.mode
        config["seed"] = self.seed
        return config

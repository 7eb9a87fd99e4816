"""How a trainer is configured and serialized: its method's options, `get_config`, `from_config`."""

import keras


class TrainerConfig:
    """`method_config`, `get_config` and `from_config` of `BaseTrainer` (a mixin).

    Reads the trainer's `config_class` (the method's options), `config` (its
    instance), `encoder_arguments` (the constructor arguments that are
    encoders), `encoder`, `mini_batch_size` and `name`.
    """

    @classmethod
    def method_config(cls, config, kwargs):
        """The trainer's `config_class` instance from `config` and the single options in `kwargs`.

        The options are removed from `kwargs` (the rest goes to Keras).

        Raises:
            TypeError: `config` given to a trainer without `config_class`,
                or not an instance or dict of its options.
            ValueError: an option's value is invalid (as for the method).
        """
        if cls.config_class is None:
            if config is not None:
                raise TypeError(f"{cls.__name__} takes no method config; received {config!r}")
            return None
        names = {f.name for f in cls.config_class.option_fields()}
        options = {k: kwargs.pop(k) for k in list(kwargs) if k in names}
        return cls.config_class.resolve(config, **options)

    def get_config(self):
        """The constructor arguments; subclasses add theirs to `super()`'s."""
        config = {
            "encoder": keras.saving.serialize_keras_object(self.encoder),
            "mini_batch_size": self.mini_batch_size,
            "name": self.name,
        }
        if self.config is not None:
            config["config"] = self.config.trainer_dict()
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        for key in cls.encoder_arguments:
            if config.get(key) is not None:
                config[key] = keras.saving.deserialize_keras_object(config[key])
        return cls(**config)


"""The package version, and the versions of the libraries a model was made with."""

__version__ = "0.1.0"


def library_versions():
    """`{"keras_sentemb", "keras", "keras_hub", "tensorflow"}` -> version strings."""
    # Imported when called: `import keras_sentemb` reads only the version.
    import keras
    import keras_hub
    import tensorflow as tf

    return {
        "keras_sentemb": __version__,
        "keras": keras.__version__,
        "keras_hub": keras_hub.__version__,
        "tensorflow": tf.__version__,
    }

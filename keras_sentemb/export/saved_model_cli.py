"""`saved_model_cli` with the tensorflow-text ops registered.

TensorFlow's `saved_model_cli show` reads a SavedModel without running it,
but `saved_model_cli run` imports the graph and fails with
`Op type not registered 'NormalizeUTF8'` unless tensorflow-text's ops are
loaded first. This wrapper imports `tensorflow_text` and hands over to
TensorFlow's own command line, with the same arguments:

```
python -m keras_sentemb.export.saved_model_cli run --dir saved_models/NAME/1 \
    --tag_set serve --signature_def serving_default \
    --input_exprs 'sentences=["A man is playing a guitar.", "Hello"]'
```

It imports only TensorFlow, tensorflow-text and `keras_sentemb.compat`.
"""

import os
import sys


def main(argv=None):
    # Imported after the log level is set, so TensorFlow starts quietly.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops)

    from keras_sentemb.compat import run_saved_model_cli

    run_saved_model_cli(list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    main()

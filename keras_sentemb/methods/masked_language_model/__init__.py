"""Masked-language-model training of any backbone: `fit_mlm`."""

from keras_sentemb.methods.method import DEV_RETRIEVAL
from keras_sentemb.methods.method import STREAMED
from keras_sentemb.methods.method import Method
from keras_sentemb.methods.registry import register_method
from keras_sentemb.methods.runner import fit_function
from keras_sentemb.pipelines.schedules import adamw_linear_decay
from keras_sentemb.methods.masked_language_model.config import MaskedLanguageModelConfig
from keras_sentemb.methods.masked_language_model.trainer import MaskedLanguageModel as MLMTrainer


@register_method("mlm")
class MaskedLanguageModelMethod(Method):
    """Train an encoder with the masked-language-model objective; return it.

    BERT's pre-training objective (15% of the tokens selected; 80% of those
    replaced by `[MASK]`, 10% by a random token, 10% kept; a fresh
    prediction head tied to the word embeddings, dropped afterwards), with
    AdamW, linear warm-up and decay. Two uses:

    - adapting an encoder to the users' domain before a contrastive method;
    - making an un-tuned start: MLM alone scrambles a sentence encoder's
      sentence-level organisation the way an MLM-only encoder has none.
      `untuned-minilm`, the start of the documentation's methods table, is
      the default model after `fit_mlm("wiki100k.txt", steps=500,
      batch_size=128, max_length=64, learning_rate=1e-4, warmup_ratio=0.4)`
      (200 warm-up steps; the documentation's Data page has the command).

    No dev selection by default (`dev=None`): the objective is not STS, and
    selecting on STS would keep the start. The kept encoder keeps its
    declared pooling (`pooling="auto"`; the model's own, else mean).

    Examples:

    ```python
    adapted = keras_sentemb.fit_mlm("my_domain.txt", steps=2000, output="adapted")
    encoder = keras_sentemb.fit_simcse("my_domain.txt", model=adapted)
    ```

    References:
        - [Devlin et al., 2019. BERT](https://arxiv.org/abs/1810.04805)
    """

    config_class = MaskedLanguageModelConfig
    paper_pooling = "mean"
    optional = ("precision", "max_grad_norm") + DEV_RETRIEVAL + STREAMED
    run_defaults = {"steps": 500, "batch_size": 128, "learning_rate": 1e-4, "max_length": 64,
                    "dev": None}
    run_docs = {"output": "Folder to save the encoder (without the head)."}
    data_doc = ("list of str, a text file, a `tf.data.Dataset` of strings or a TFDS name; a "
                "glob of files, `keras_sentemb.streamed(...)` or a `Mixture` is streamed.")

    def train(self, run, data, config):
        sentences, stream, n = run.read_sentences(data)
        with run.scope():
            encoder, plan = run.start(examples=n)
            trainer = MLMTrainer(encoder, config, seed=run.seed or 0)
            optimizer = adamw_linear_decay(plan.learning_rate, plan.steps, config.warmup_ratio,
                                           config.weight_decay)
            optimizer.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])
        if stream is None:
            make_dataset = run.batches(encoder, {"sentence": sentences}, plan)
        else:  # not an in-batch loss: a text twice in a batch is harmless
            make_dataset = run.stream_batches(encoder, stream, ("sentence",), plan)
        return run.train(trainer, optimizer, make_dataset, plan)


# The `fit_*` function: its signature and docstring are the method's.
fit_mlm = fit_function("mlm", "fit_mlm")

"""SNCSE, unsupervised: negated sentences as soft negatives (margin loss): `fit_sncse`."""

from keras_sentemb.methods.method import DEV_RETRIEVAL
from keras_sentemb.methods.method import STREAMED
from keras_sentemb.methods.method import STREAMED_DATA_DOC
from keras_sentemb.methods.method import Method
from keras_sentemb.methods.registry import register_method
from keras_sentemb.methods.runner import fit_function
from keras_sentemb.methods.sncse.config import PAPER_POOLING
from keras_sentemb.methods.sncse.config import PRESETS
from keras_sentemb.methods.sncse.config import SNCSEConfig
from keras_sentemb.methods.sncse.negation import negation_view
from keras_sentemb.methods.sncse.trainer import SNCSE as SNCSETrainer
from keras_sentemb.pipelines.schedules import adamw_linear_decay


@register_method("sncse")
class SNCSEMethod(Method):
    """Trains a sentence encoder with SNCSE (negations as soft negatives) and returns it.

    Unsupervised SimCSE on the sentences of `data` (e.g. Wikipedia): two
    dropout views of each sentence, InfoNCE at temperature 0.05 against
    the batch. Each sentence's negation (made by rules: "is" -> "is not",
    "has a" -> "does not have a", a "not" or "n't" removed, else "Not "
    before it) is a soft negative: textually close, opposite in meaning.
    It is no InfoNCE candidate; a bidirectional margin loss (weight
    `bml_weight`, 1e-3) keeps `cos(h, h_neg) - cos(h, h+)` within
    `[-bml_beta, -bml_alpha]` = [-0.3, -0.1]: the negation less similar to
    the sentence than its positive, but not as far as an unrelated
    sentence. Batch 256, learning rate 1e-5 (linear decay), max length 32,
    one epoch, [CLS] pooling with an MLP head in training only (the
    model's own pooling when it declares one). With `dev` (STS-B dev by
    default) the best checkpoint, every 125 steps and the starting weights
    included, is kept.

    Deliberate differences from the official code: it embeds every
    sentence in PromptBERT's template (`This sentence : " [X] " means
    [MASK] .`, another template for the positive and the negation) and
    takes the [MASK] token's vector, in training and at inference; the
    encoders here take no template, so SNCSE runs over the encoder's
    ordinary pooled vector, and the positive differs from the sentence by
    dropout alone. The official negations come from a spaCy parse, made
    once offline; here regular expressions make them in the `tf.data`
    pipeline (`keras_sentemb.methods.sncse.negation` lists the rules and
    where they differ).

    Examples:

    ```python
    encoder = fit_sncse("wiki100k.txt", steps=300)
    encoder = fit_sncse("wiki100k.txt", preset="unsup-bert-base")
    ```

    References:
        - [Wang et al., 2022. SNCSE: Contrastive Learning for Unsupervised
          Sentence Embedding with Soft Negative
          Samples](https://arxiv.org/abs/2201.05979).
        - [Gao et al., 2021. SimCSE: Simple Contrastive Learning of Sentence
          Embeddings](https://arxiv.org/abs/2104.08821).
    """

    config_class = SNCSEConfig
    paper_pooling = PAPER_POOLING
    in_batch = True
    optional = ("precision", "max_grad_norm") + DEV_RETRIEVAL + STREAMED
    run_defaults = {"batch_size": 256, "learning_rate": 1e-5, "max_length": 32,
                    "eval_every": 125, "seed": 42, "max_grad_norm": 1.0}
    data_doc = STREAMED_DATA_DOC

    presets = PRESETS

    def train(self, run, data, config):
        sentences, stream, n = run.read_sentences(data)
        with run.scope():
            encoder, plan = run.start(examples=n, mlp=config.mlp)
            trainer = SNCSETrainer(encoder, config, pooling=plan.pooling)
        optimizer = adamw_linear_decay(plan.learning_rate, plan.steps)
        views = {"negated": ("sentence", negation_view)}
        make_dataset = run.sentence_batches(encoder, sentences, stream, plan, no_duplicates=True,
                                            text_views=views)
        return run.train(trainer, optimizer, make_dataset, plan)


# The `fit_*` function: its signature and docstring are the method's.
fit_sncse = fit_function("sncse", "fit_sncse")

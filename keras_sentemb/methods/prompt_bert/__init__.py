"""PromptBERT, unsupervised: a template's [MASK] state as the vector: `fit_promptbert`."""

import dataclasses
import logging

from keras_sentemb.methods.method import DEV_RETRIEVAL
from keras_sentemb.methods.method import STREAMED
from keras_sentemb.methods.method import STREAMED_DATA_DOC
from keras_sentemb.methods.method import Method
from keras_sentemb.methods.prompt_bert.config import PAPER_POOLING
from keras_sentemb.methods.prompt_bert.config import PRESETS
from keras_sentemb.methods.prompt_bert.config import PromptBERTConfig
from keras_sentemb.methods.prompt_bert.trainer import PromptBERT as PromptBERTTrainer
from keras_sentemb.methods.registry import register_method
from keras_sentemb.methods.runner import fit_function
from keras_sentemb.pipelines.callbacks import sts_spearman
from keras_sentemb.pipelines.schedules import adamw_linear_decay

logger = logging.getLogger(__name__)


class TemplateView:
    """Packs a column as `encoder` does, framed in another template (the positive's).

    What `tokenize_columns` needs of a column's encoder: `preprocess`,
    `packed_length`, `max_length` and `pad_token_id`.
    """

    def __init__(self, encoder, template):
        self.encoder = encoder
        self.prompt = encoder.make_prompt(template)
        self.max_length = encoder.max_length
        self.pad_token_id = encoder.pad_token_id

    def preprocess(self, sentences, max_length=None):
        return self.encoder.preprocess(sentences, max_length, prompt=self.prompt)

    def packed_length(self, max_length):
        return self.encoder.packed_length(max_length, prompt=self.prompt)


def same_text(texts, key):
    """The positive's text: the sentence itself (its template differs)."""
    del key
    return texts


@register_method("promptbert")
class PromptBERTMethod(Method):
    """Trains a sentence encoder with PromptBERT (template views and denoising) and returns it.

    Every sentence of `data` (e.g. Wikipedia) is read through a template,
    `This sentence of "[X]" means [MASK] .`; its vector is the last layer's
    state at [MASK]. The positive is the same sentence in a second template
    (`This sentence : "[X]" means [MASK] .`), both encoded with dropout.
    Template denoising subtracts from each vector the [MASK] state of its
    template alone (positions as around a sentence of that length), in
    training only. A tanh MLP head follows in training only. InfoNCE at
    temperature 0.05 against the batch's positives; batch 256, learning
    rate 1e-5 (linear decay), max length 32 (the sentence's tokens; the
    template's come on top), one epoch. That is the paper's setting for a
    raw backbone; a model that declares its own pooling (a sentence
    encoder) trains the two templates' views in that pooling, without the
    MLP head (`pooling="auto"`, `mlp="auto"`; `pooling="mask"` asks for the
    paper's vector). The returned encoder keeps the first template:
    `encode`, evaluation and the SavedModel frame each sentence in it. Hugging Face, LiteRT and keras-hub `TextEmbedder`
    exports refuse such an encoder (they tokenize the sentence alone). With
    `dev` (STS-B dev by default) the best checkpoint, the starting weights
    included, is kept.

    Examples:

    ```python
    encoder = fit_promptbert("wiki100k.txt", steps=300)
    encoder = fit_promptbert("wiki100k.txt", preset="unsup-bert-base")
    encoder = fit_promptbert("wiki100k.txt", denoise=False)   # no template denoising
    ```

    References:
        - [Jiang et al., 2022. PromptBERT: Improving BERT Sentence Embeddings
          with Prompts](https://arxiv.org/abs/2201.04337).
    """

    config_class = PromptBERTConfig
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
            given = _given_candidate(run, encoder, plan)
            encoder.prompt = config.template
            trainer = PromptBERTTrainer(encoder, config, pooling=plan.pooling)
        optimizer = adamw_linear_decay(plan.learning_rate, plan.steps)
        views = {"positive": ("sentence", same_text)}
        packers = {"positive": TemplateView(encoder, config.positive_template)}
        make_dataset = run.sentence_batches(encoder, sentences, stream, plan, no_duplicates=True,
                                            text_views=views, encoders=packers)
        run.compile(trainer, optimizer)
        selection = run.fit(trainer, make_dataset, plan)
        if given is not None and selection is not None and given.score >= selection.best_score:
            # The model as it was given reads STS-B dev better than any checkpoint read
            # through the template: it is kept, its own pooling and no template.
            given.restore(trainer.encoder)
            plan = dataclasses.replace(plan, pooling=given.pooling)
            run.report.pooling = given.pooling
            run.report.pooling_reason = (
                f"the model as given ({given.pooling} pooling, no template) scored STS-B dev "
                f"{given.score:.2f}, above every checkpoint's template vector "
                f"({selection.best_score:.2f}); it is kept")
            logger.info("promptbert: %s", run.report.pooling_reason)
        return run.finish(trainer.encoder, plan,
                          extras=None if given is None else {"given_model_dev": given.score})


class _Given:
    """The model as given (its own pooling, no template) as a dev candidate: score and weights."""

    def __init__(self, encoder, pooling, score):
        self.pooling, self.score = pooling, score
        self.weights = encoder.get_weights()

    def restore(self, encoder):
        encoder.set_weights(self.weights)
        encoder.pooling = self.pooling  # before the template goes: it no longer reads [MASK]
        encoder.prompt = None


def _given_candidate(run, encoder, plan):
    """`_Given` for a model that declares its own pooling, when STS dev chooses the kept model.

    PromptBERT reads every sentence through its template: the starting
    weights read so can score below the model itself (the default model:
    STS-B dev 86.72 with its mean pooling, 82.97 with it through the
    template, 40.90 at the template's [MASK]). So the model as given is a
    candidate too, and training never returns a model that reads dev worse
    than it.
    """
    own = encoder.declared_pooling
    pairs = run.config.dev_pairs
    if own is None or not pairs or run.config.dev_select == "retrieval" or plan.mlp == "keep":
        return None
    if encoder.prompt_template is not None:
        return None  # already a template model: its own start is the candidate
    return _Given(encoder, own, sts_spearman(encoder, pairs, pooling=own))


# The `fit_*` function: its signature and docstring are the method's.
fit_promptbert = fit_function("promptbert", "fit_promptbert")

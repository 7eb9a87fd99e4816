"""BERT-flow, a Glow-style flow fitted on a frozen encoder's vectors: `fit_flow`."""


import numpy as np

from keras_sentemb.data.batching import shuffled_batches
from keras_sentemb.methods.method import DEV_RETRIEVAL
from keras_sentemb.methods.method import STREAMED
from keras_sentemb.methods.method import Method
from keras_sentemb.methods.registry import register_method
from keras_sentemb.methods.runner import fit_function
from keras_sentemb.models.glow_flow import GlowFlow
from keras_sentemb.pipelines._frozen_encoder import DevRetrievalVectors
from keras_sentemb.pipelines._frozen_encoder import DevVectors
from keras_sentemb.pipelines._frozen_encoder import FittingData
from keras_sentemb.pipelines._frozen_encoder import load_frozen_encoder
from keras_sentemb.pipelines.callbacks import DevSelection
from keras_sentemb.pipelines.schedules import adamw_linear_decay
from keras_sentemb.methods.bert_flow.config import FlowConfig
from keras_sentemb.methods.bert_flow.trainer import BertFlow

# Vectors used for the flow's data-dependent (actnorm) initialisation.
INIT_SAMPLE = 1024


@register_method("flow")
class FlowMethod(Method):
    """Fits BERT-flow on unlabelled sentences and attaches the flow to the encoder.

    The frozen encoder encodes the sentences of `data` once with the run's
    pooling; a `GlowFlow` (actnorm, invertible 1x1, coupling; `levels` x
    `depth` steps) is initialised on them (Glow's data-dependent actnorm
    init on up to 1,024 vectors) and trained by maximum likelihood under a
    standard normal prior (`BertFlow`). The flow's latent replaces the
    vector: it is saved with the encoder and runs inside `encode`,
    evaluation and the exported SavedModel.

    Defaults follow BERT-flow's code: pooling `"mean_last2"` for a raw
    backbone (the model's own when it declares one: `pooling="auto"`), one
    epoch, batch 32, AdamW (weight decay 0.01) at 1e-3 with 10% linear
    warmup and linear decay, 3 levels of 3 steps with coupling width 32.
    BERT-flow's configuration files use `coupling="additive"` and
    `permutation="reverse"`; the defaults here are Glow's affine coupling
    and learned 1x1. With `dev` (STS-B dev) the flow is scored every
    `eval_every` steps on the dev sentences' (precomputed) vectors and the
    best weights are kept, the initial flow included. The result is the
    `SentenceEncoder` with its `GlowFlow` post-processing layer.

    Examples:

    ```python
    encoder = keras_sentemb.fit_flow("wiki100k.txt", model="default",
                                     pooling="mean_last2", output="minilm_flow")
    ```

    References:
        - [Li et al., 2020. On the Sentence Embeddings from Pre-trained
          Language Models](https://arxiv.org/abs/2011.05864)
    """

    config_class = FlowConfig
    paper_pooling = "mean_last2"
    run_defaults = {"learning_rate": 1e-3, "eval_every": 500, "seed": 42}
    optional = DEV_RETRIEVAL + STREAMED
    run_docs = {
        "model": "The encoder, kept frozen (see the shared `model`); a model that already has a "
                 "post-processing layer has it replaced.",
        "steps": "Flow training steps; `None` = `epochs` passes over the sentences.",
        "batch_size": "Vectors per flow step.",
        "callbacks": "Keras callbacks (e.g. the command line's `BackupAndRestore`: a resumed "
                     "run continues the flow's training).",
        "verbose": "Keras `fit` verbosity (and the encoding progress bar).",
    }
    data_doc = ("list of str, a text file (one sentence per line) or a TFDS name (encoded "
                "once, in memory); a glob or list of files, `keras_sentemb.streamed(...)` or a "
                "`tf.data.Dataset` of strings (streamed: the flow is initialised on the first "
                "1,024 sentences of the shuffled stream and each step encodes its own batch, "
                "so `steps` bounds what is read); or the sentences' precomputed vectors (a "
                "float array `[n, d]` or a `.npy` file, e.g. from `keras-sentemb encode` with "
                "the same model and pooling).")

    def train(self, run, data, config):
        # A TFDS name is read into memory, as before streams: the same batches for a seed.
        source = FittingData(data, tfds=False)
        run.record_data(**source.describe())
        with run.scope():
            encoder, plan = load_frozen_encoder(run, examples=source.count, epochs=config.epochs)
            flow = GlowFlow(
                encoder.base_output_dim, levels=config.levels, depth=config.depth,
                coupling_width=config.coupling_width, coupling=config.coupling,
                permutation=config.permutation, pooling=plan.pooling, seed=run.seed,
            )
            flow.build()
        features = None  # batches carry their vectors
        if source.stream is None:
            vectors = source.vectors(run, plan, encoder, config.encode_batch_size, run.verbose)
            sample = np.random.default_rng(run.seed or 0).permutation(len(vectors))[:INIT_SAMPLE]
            flow.initialize(vectors[np.sort(sample)])

            def make_dataset(start_step):
                return shuffled_batches({}, run.batch_size, seed=run.seed or 0,
                                        start_step=start_step, extra={"vector": vectors})
        else:
            # Streamed: the first sentences of the shuffled stream initialise the flow, and
            # each step encodes its own batch (nothing is encoded up front).
            flow.initialize(source.sample_vectors(run, plan, encoder, INIT_SAMPLE,
                                                  config.encode_batch_size))
            make_dataset = run.stream_batches(encoder, source.stream, ("sentence",), plan)
            features = lambda packed: encoder.sentence_vectors(  # noqa: E731
                packed, plan.pooling, training=False, normalize=encoder.normalize)
        with run.scope():
            trainer = BertFlow(flow)
        trainer.set_features(features)
        run.compile(trainer, adamw_linear_decay(plan.learning_rate, plan.steps,
                                                config.warmup_ratio, config.weight_decay))
        extras = {}
        selection = None
        if run.dev_pairs is not None:
            dev_set = DevVectors(run, plan, encoder, config.encode_batch_size)
            extras["dev_spearman_without_flow"] = round(dev_set.spearman(), 4)
            selection = DevSelection(lambda name, layer: dev_set.spearman(layer),
                                     monitor="sts_dev_spearman")

        retrieval_score = None
        if run.dev_retrieval_data is not None:
            retrieval_set = DevRetrievalVectors(run, plan, encoder, config.encode_batch_size)
            extras["dev_retrieval_ndcg_at_10_without_flow"] = round(retrieval_set.ndcg(), 4)
            retrieval_score = lambda name, layer: retrieval_set.ndcg(layer)  # noqa: E731
        run.fit(trainer, make_dataset, plan, selection=selection, retrieval_score=retrieval_score)
        encoder.postprocess = trainer.flow
        return run.finish(encoder, plan, extras=extras)


# The `fit_*` function: its signature and docstring are the method's.
fit_flow = fit_function("flow", "fit_flow")

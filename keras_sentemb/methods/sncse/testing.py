"""How the tests that cover every method train a tiny model with SNCSE, and its own checks.

Beyond the shared tiny run (save, reload, the same vectors), `check` tests
what is SNCSE's own: the negation rules sentence by sentence, the loss
(InfoNCE plus the bidirectional margin loss) against its closed form in
NumPy, and that the method's pipeline (in memory and streamed) gives the
trainer each sentence's negation as `data["negated"]`.

No `reference`: the official loss (Sense-GVT/SNCSE `SNCSE/simcse/models.py`,
`cl_forward`) cannot run on its own. It is the body of a Hugging Face
model's forward pass: it runs the BERT/RoBERTa encoder itself, takes the
vectors at the prompt's [MASK] tokens (`input_ids == mask_token_id`), and
reads its settings from the training script's `model_args`; the repository
is not an installable package, so the PyTorch worker has no copy to import.
Its arithmetic is a few lines (models.py lines 145-159), which the NumPy
closed form below follows term by term.
"""

from keras_sentemb.methods.testing import MethodTest
from keras_sentemb.methods.testing import packed_rows

# Each sentence and its negation by the rules of `negation.py`.
NEGATIONS = [
    ("a man is playing the guitar .", "a man is not playing the guitar ."),
    ("He was born in 1950.", "He was not born in 1950."),
    ("The city has a population of 5,000.", "The city does not have a population of 5,000."),
    ("He had to leave.", "He did not have to leave."),
    ("We did the work.", "We did not do the work."),
    ("They have gone home.", "They have not gone home."),
    ("They're happy.", "They're not happy."),
    ("In May 2010, he will run.", "In May 2010, he will not run."),
    ("The man who was arrested fled.", "The man who was not arrested fled."),
    ("He decided to have the house rebuilt and was happy.",
     "He decided to have the house rebuilt and was not happy."),
    ("Not all birds can fly.", "Not all birds can not fly."),
    ("It is not easy.", "It is easy."),
    ("not bad", "bad"),
    ("I don't know.", "I do know."),
    ("It isn\u2019t true.", "It is true."),
    ("She cannot swim.", "She can swim."),
    ("He can't swim.", "He can swim."),
    ("They won't come.", "They will come."),
    ("do n't go", "do go"),
    ("The album features ten songs.", "Not The album features ten songs."),
    ("Is it true?", "Not Is it true?"),
    ("hello world", "Not hello world"),
    ("", ""),
    ("   ", "   "),
]


def _trainer(encoder):
    from keras_sentemb.methods.sncse.trainer import SNCSE

    return SNCSE(encoder, temperature=0.1, bml_alpha=0.05, bml_beta=0.2, bml_weight=0.01,
                 pooling="cls", mlp="train")


def check_negation():
    import tensorflow as tf

    from keras_sentemb.methods.sncse.negation import negate
    from keras_sentemb.methods.sncse.negation import negation_view

    texts = tf.constant([s for s, _ in NEGATIONS])
    got = [t.decode("utf-8") for t in negate(texts).numpy()]
    for (sentence, want), out in zip(NEGATIONS, got):
        assert out == want, (sentence, out, want)
    # A pure function of the text: the key changes nothing, nor does the batch around it.
    for key in ([0, 0], [7, 3]):
        again = negation_view(texts, tf.constant(key, tf.int64)).numpy()
        assert [t.decode("utf-8") for t in again] == got
    alone = negate(tf.constant([NEGATIONS[2][0]])).numpy()[0].decode("utf-8")
    assert alone == NEGATIONS[2][1]


def reference_loss(anchors, positives, negated, temperature, alpha, beta, weight):
    """The loss in NumPy, as the official `cl_forward`: `(loss, bml, gaps)`."""
    import numpy as np

    def unit(x):
        x = np.asarray(x, np.float64)
        return x / np.linalg.norm(x, axis=-1, keepdims=True)

    a, p, n = unit(anchors), unit(positives), unit(negated)
    logits = a @ p.T / temperature
    top = logits.max(axis=1, keepdims=True)
    log_softmax = logits - top - np.log(np.exp(logits - top).sum(axis=1, keepdims=True))
    info_nce = -np.mean(np.diag(log_softmax))
    gaps = (a * n).sum(-1) - (a * p).sum(-1)
    bml = np.mean(np.maximum(gaps + alpha, 0.0) + np.maximum(-gaps - beta, 0.0))
    return info_nce + weight * bml, bml, gaps


def check_loss():
    import numpy as np

    from keras_sentemb.methods.sncse.trainer import bidirectional_margin_loss
    from keras_sentemb.methods.sncse.trainer import sncse_loss

    rng = np.random.default_rng(0)
    a, p, n = (rng.normal(size=(6, 8)).astype("float32") for _ in range(3))
    cases = [(a, p, n), (a, p, a), (a, p, p), (a, p, -a), (a, a + 0.1 * p, 0.7 * a + 0.3 * n)]
    for anchors, positives, negated in cases:
        for temperature, alpha, beta, weight in ((0.05, 0.1, 0.3, 1e-3), (0.5, 0.0, 0.5, 1.0),
                                                 (0.1, 0.2, 0.2, 0.3)):
            loss, parts = sncse_loss(anchors, positives, negated, temperature, alpha, beta,
                                     weight)
            want, bml, gaps = reference_loss(anchors, positives, negated, temperature, alpha,
                                             beta, weight)
            assert abs(float(loss) - want) <= 1e-5 * abs(want), (float(loss), want)
            assert abs(float(parts["bml"]) - bml) <= 1e-5 * max(bml, 1.0), (parts, bml)
            assert abs(float(parts["negation_gap"]) - gaps.mean()) <= 1e-5
            assert abs(float(parts["info_nce"]) + weight * bml - want) <= 1e-5 * abs(want)
    # The margins, one row each: the gap inside [-beta, -alpha] costs nothing, above it
    # gap + alpha, below it -gap - beta.
    angle = np.arccos([0.8, 0.95, 0.5])  # cos(h, h_neg), with cos(h, h+) = 1
    anchors = np.tile([[1.0, 0.0]], (3, 1)).astype("float32")
    negated = np.stack([np.cos(angle), np.sin(angle)], axis=1).astype("float32")
    for row, want in enumerate((0.0, 0.05, 0.2)):
        loss, gap = bidirectional_margin_loss(anchors[row:row + 1], anchors[row:row + 1],
                                              negated[row:row + 1], 0.1, 0.3)
        assert abs(float(loss) - want) <= 1e-5, (row, float(loss), float(gap[0]), want)


def check_trainer_loss(encoder):
    """The trainer's loss on a batch: the closed form of its own (dropout-free) vectors."""
    import tensorflow as tf

    from keras_sentemb.methods.sncse.negation import negate
    from keras_sentemb.methods.sncse.trainer import SNCSE

    trainer = SNCSE(encoder.clone("sncse_check"), pooling="mean", mlp="none", temperature=0.1,
                    bml_weight=0.5)
    texts = tf.constant([s for s, _ in NEGATIONS[:6]])
    batch = {"sentence": trainer.encoder.preprocess(texts, 16),
             "negated": trainer.encoder.preprocess(negate(texts), 16)}
    embeddings = trainer.embed_batch(batch, training=False)
    got = float(trainer.compute_loss_terms(batch, training=False).loss)
    c = trainer.config
    want = reference_loss(embeddings["first"].numpy(), embeddings["second"].numpy(),
                          embeddings["negated"].numpy(), c.temperature, c.bml_alpha,
                          c.bml_beta, c.bml_weight)[0]
    assert abs(got - want) <= 1e-4 * abs(want), (got, want)
    with tf.GradientTape() as tape:
        loss = trainer.compute_loss_terms(batch, training=True).loss
    grads = tape.gradient(loss, trainer.trainable_variables)
    assert any(g is not None for g in grads) and bool(tf.math.is_finite(loss))
    try:
        SNCSE(encoder, bml_alpha=0.5, bml_beta=0.1)
    except ValueError as error:
        assert "bml_alpha" in str(error)
    else:
        raise AssertionError("bml_alpha > bml_beta must be refused")


def _method_batches(encoder, data):
    """The first batches of `fit_sncse`'s pipeline on `data`, from step 0 and from step 1."""
    from keras_sentemb.methods.sncse import fit_sncse
    from keras_sentemb.methods.testing import first_batches

    return first_batches(fit_sncse, data, model=encoder, steps=2, batch_size=4, max_length=16,
                         dev=None, verbose=0, seed=5)


def check_negations_in_the_pipeline(encoder, folder):
    """`fit_sncse`'s batches hold each sentence's negation, tokenized, as `"negated"`."""
    import tensorflow as tf

    from keras_sentemb.methods.sncse.negation import negate

    sentences = [f"the cat {i} is on the mat ." if i % 2 else f"dogs {i} have a ball"
                 for i in range(12)]
    expected = dict(zip(packed_rows(encoder.preprocess(tf.constant(sentences), 16)),
                        packed_rows(encoder.preprocess(negate(tf.constant(sentences)), 16))))
    stream_file = folder / "sncse_stream_0.txt"
    stream_file.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    for data in (sentences, str(folder / "sncse_stream_*.txt")):
        full, resumed = _method_batches(encoder, data)
        assert len(full) == 2 and len(resumed) == 1
        for batch in full:
            assert set(batch) >= {"sentence", "negated"}
            pairs = list(zip(packed_rows(batch["sentence"]), packed_rows(batch["negated"])))
            assert len(pairs) == 4
            for sentence, negated in pairs:
                assert expected[sentence] == negated, (data, sentence, negated)
        # A resumed run reads the batch the uninterrupted run read at that step.
        assert packed_rows(resumed[0]["negated"]) == packed_rows(full[1]["negated"])


def check(encoder, folder):
    """SNCSE's own checks, on the tiny run's encoder (its tokenizer and weights)."""
    check_negation()
    check_loss()
    check_trainer_loss(encoder)
    check_negations_in_the_pipeline(encoder, folder)


METHOD_TEST = MethodTest(make_trainer=_trainer, check=check)

"""How the tests that cover every method train a tiny model with PromptBERT, and its own checks.

Beyond the shared tiny run (save, reload, the same vectors), `check` tests
what is PromptBERT's own: every packer frames sentences in the template
alike (the graph packer, the bulk packer of `encode`, a hand-built list),
truncation never drops [MASK]; the template-alone inputs' positions; the
trainer's vectors and loss against a row-by-row computation (each sentence
run alone, [MASK] found by its id, the template's state subtracted) and the
InfoNCE closed form in NumPy; the method's pipeline (in memory and
streamed) gives the trainer each sentence in the second template; and the
saved encoder frames sentences in `encode` and the SavedModel, and the
formats that tokenize outside the model refuse it in one line.

`reference` runs the official arithmetic (kongds/Prompt-BERT
`prompt_bert/models.py`, `cl_forward` with `get_delta`) in PyTorch over
transformers' BERT with the same weights: the official file is the body of
a Hugging Face model's forward pass and reads the training script's
arguments, so it cannot be imported; `torch_reference.py` follows it line
by line.
"""

from keras_sentemb.methods.testing import MethodTest
from keras_sentemb.methods.testing import packed_rows

SENTENCES = ["a man plays the guitar .", "the cat sits on the mat .", "hello world",
             "a woman is slicing an onion and the dog runs in the park ."]


def _trainer(encoder):
    from keras_sentemb.methods.prompt_bert.trainer import PromptBERT

    return PromptBERT(encoder, temperature=0.1, denoise=False, mlp="none",
                      positive_template="the sentence [X] means [MASK]")


def _ids(encoder, text):
    return [int(t) for t in encoder.tokenize([text])[0].numpy()]


def _framed(encoder, prompt, text, max_length):
    body = _ids(encoder, text)[: encoder.body_length(max_length, prompt)]
    return [encoder.start_token_id, *prompt.prefix, *body, *prompt.suffix, encoder.end_token_id]


def check_packing(encoder):
    """Graph packing, `encode`'s bulk packing and a hand-built list agree; [MASK] always stays."""
    from keras_sentemb.methods.prompt_bert.config import BERT_TEMPLATE

    encoder = encoder.clone("prompt_packing")
    encoder.prompt = BERT_TEMPLATE
    prompt = encoder.prompt
    mask_id = int(encoder.tokenizer.mask_token_id)
    assert prompt.prefix and prompt.suffix and prompt.mask_index < 0
    assert prompt.suffix[prompt.mask_index + 1] == mask_id  # -1 is the end token
    long = " ".join(["the cat"] * 40)
    texts = SENTENCES + [long, ""]
    for max_length in (8, 16, 64):
        want = [_framed(encoder, prompt, t, max_length) for t in texts]
        assert packed_rows(encoder.preprocess(texts, max_length)) == [tuple(w) for w in want]
        got = {}
        for idx, ids, mask in encoder.packed_batches(texts, 3, max_length):
            for i, row, keep in zip(idx, ids, mask):
                got[int(i)] = [int(t) for t, m in zip(row, keep) if m]
                assert row.shape[0] <= encoder.packed_length(max_length)
        assert [got[i] for i in range(len(texts))] == want
        for row in want:  # [MASK] where pooling looks for it, however long the sentence
            assert row[len(row) + prompt.mask_index] == mask_id
        assert len(want[-2]) == encoder.packed_length(max_length)
    # The sentence keeps max_length - 2 tokens; the template's come on top, up to the last position.
    limit = int(encoder.backbone.max_sequence_length)
    assert encoder.body_length(limit) == limit - prompt.extra - 2
    assert encoder.packed_length(limit) == limit
    assert encoder.body_length(16) == 14
    # A template with [MASK] before the sentence counts from the start.
    front = encoder.make_prompt("[MASK] : [X]")
    assert front.mask_index == 1 and front.suffix == ()
    for bad, words in (("no slot", "exactly once"), ("[X] [X]", "exactly once"),
                       ("[MASK] [X] [MASK]", "at most once"), (7, "must be a str")):
        try:
            encoder.make_prompt(bad)
        except ValueError as error:
            assert words in str(error), (bad, error)
        else:
            raise AssertionError(f"{bad!r} must be refused")
    plain = encoder.clone("no_prompt")
    try:
        plain.prompt = None  # the clone pools [MASK]
    except ValueError as error:
        assert "no prompt with [MASK]" in str(error)
    else:
        raise AssertionError("removing the prompt of a mask-pooling encoder must be refused")
    plain.pooling = "mean"
    plain.prompt = None
    try:
        plain.pooling = "mask"
    except ValueError as error:
        assert "no prompt with [MASK]" in str(error)
    else:
        raise AssertionError("mask pooling without a prompt must be refused")


def check_template_inputs():
    from keras_sentemb.methods.prompt_bert.trainer import template_inputs
    from keras_sentemb.models.prompt import Prompt

    prompt = Prompt("p q [X] r s [MASK] t", (5, 6), (7, 8, 9, 10), -3)
    inputs = template_inputs(prompt, 1, 2, 4)
    assert inputs["token_ids"].numpy().tolist() == [[1, 5, 6, 7, 8, 9, 10, 2]] * 4
    assert inputs["padding_mask"].numpy().min() == 1
    # Around a sentence of l tokens the template sits at 0..2, then 3 + l onwards.
    want = [[0, 1, 2] + [3 + l + j for j in range(5)] for l in range(4)]
    assert inputs["position_ids"].numpy().tolist() == want


def info_nce(anchors, positives, temperature):
    """InfoNCE in NumPy: each anchor against every positive, its own the label."""
    import numpy as np

    a = np.asarray(anchors, np.float64)
    p = np.asarray(positives, np.float64)
    a /= np.linalg.norm(a, axis=1, keepdims=True)
    p /= np.linalg.norm(p, axis=1, keepdims=True)
    logits = a @ p.T / temperature
    top = logits.max(axis=1, keepdims=True)
    log_softmax = logits - top - np.log(np.exp(logits - top).sum(axis=1, keepdims=True))
    return float(-np.mean(np.diag(log_softmax)))


def row_by_row(trainer, prompt, texts, max_length):
    """Each sentence's training vector, computed alone: [MASK] found by its id, the template's
    own state (positions shifted by the sentence's length) subtracted, then the MLP head."""
    import numpy as np
    import tensorflow as tf

    encoder = trainer.encoder
    mask_id = int(encoder.tokenizer.mask_token_id)
    out = []
    for text in texts:
        ids = _framed(encoder, prompt, text, max_length)
        last = encoder.hidden_states({"token_ids": tf.constant([ids]),
                                      "padding_mask": tf.ones([1, len(ids)], tf.int32)})[-1]
        vector = last[0, ids.index(mask_id)].numpy().astype(np.float64)
        if trainer.config.denoise:
            length = len(ids) - len(prompt.prefix) - len(prompt.suffix) - 2
            alone = [encoder.start_token_id, *prompt.prefix, *prompt.suffix,
                     encoder.end_token_id]
            lead = 1 + len(prompt.prefix)
            positions = [j if j < lead else j + length for j in range(len(alone))]
            states, _ = encoder.forward({"token_ids": tf.constant([alone]),
                                         "padding_mask": tf.ones([1, len(alone)], tf.int32),
                                         "position_ids": tf.constant([positions])})
            vector -= states[-1][0, alone.index(mask_id)].numpy()
        if trainer.mlp is not None:
            vector = trainer.mlp(vector[None].astype("float32")).numpy()[0]
        out.append(vector)
    return np.stack(out)


def check_trainer_loss(encoder):
    """The trainer's vectors and loss on a batch: the row-by-row vectors and the closed form."""
    import numpy as np
    import tensorflow as tf

    from keras_sentemb.methods.prompt_bert.trainer import PromptBERT

    for options in ({}, {"denoise": False, "mlp": "none", "temperature": 0.2}):
        trainer = PromptBERT(encoder.clone("promptbert_check"), **options)
        batch = {"sentence": trainer.encoder.preprocess(SENTENCES, 16),
                 "positive": trainer.encoder.preprocess(SENTENCES, 16, trainer.positive_prompt)}
        z = trainer.embed_batch(batch, training=True, dropout=False)
        for key, prompt in (("sentence", trainer.encoder.prompt),
                            ("positive", trainer.positive_prompt)):
            want = row_by_row(trainer, prompt, SENTENCES, 16)
            got = z[key].numpy()
            error = np.linalg.norm(got - want, axis=1) / np.linalg.norm(want, axis=1)
            assert error.max() <= 1e-4, (options, key, error)
        loss = float(trainer.loss_from_embeddings(z, batch).loss)
        want = info_nce(z["sentence"].numpy(), z["positive"].numpy(), trainer.config.temperature)
        assert abs(loss - want) <= 1e-5 * abs(want), (loss, want)
        # Denoising acts in training only: evaluation reads the encoder's own [MASK] vector.
        plain = trainer.embed_one(batch["sentence"], trainer.encoder.prompt, training=False)
        vectors = trainer.encoder(batch["sentence"]).numpy()
        cos = np.sum(plain.numpy() * vectors, 1) / (
            np.linalg.norm(plain.numpy(), axis=1) * np.linalg.norm(vectors, axis=1))
        assert cos.min() >= 1 - 1e-5, cos
    with tf.GradientTape() as tape:
        loss = trainer.compute_loss_terms(batch, training=True).loss
    grads = tape.gradient(loss, trainer.trainable_variables)
    assert any(g is not None for g in grads) and bool(tf.math.is_finite(loss))


def _method_batches(encoder, data):
    """The first batches of `fit_promptbert`'s pipeline on `data`, from step 0 and from step 1."""
    from keras_sentemb.methods.prompt_bert import fit_promptbert
    from keras_sentemb.methods.testing import first_batches

    return first_batches(fit_promptbert, data, model=encoder, steps=2, batch_size=4, max_length=16,
                         dev=None, verbose=0, seed=5)


def check_views_in_the_pipeline(encoder, folder):
    """`fit_promptbert`'s batches hold each sentence in both templates, in memory and streamed."""
    from keras_sentemb.methods.prompt_bert.config import BERT_POSITIVE_TEMPLATE
    from keras_sentemb.methods.prompt_bert.config import BERT_TEMPLATE

    encoder = encoder.clone("promptbert_pipeline")
    encoder.pooling = "mean"
    encoder.prompt = None
    first = encoder.make_prompt(BERT_TEMPLATE)
    second = encoder.make_prompt(BERT_POSITIVE_TEMPLATE)
    sentences = [f"the cat {i} sits on the mat ." for i in range(12)]
    expected = {tuple(_framed(encoder, first, s, 16)): tuple(_framed(encoder, second, s, 16))
                for s in sentences}
    stream_file = folder / "promptbert_stream_0.txt"
    stream_file.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    for data in (sentences, str(folder / "promptbert_stream_*.txt")):
        full, resumed = _method_batches(encoder, data)
        assert len(full) == 2 and len(resumed) == 1
        for batch in full:
            pairs = list(zip(packed_rows(batch["sentence"]), packed_rows(batch["positive"])))
            assert len(pairs) == 4
            for sentence, positive in pairs:
                assert expected[sentence] == positive, (data, sentence, positive)
        assert packed_rows(resumed[0]["positive"]) == packed_rows(full[1]["positive"])
    assert encoder.prompt == first  # trained in place, the model reads the first template


def check_saved_encoder(encoder, folder, scratch):
    """The tiny run's encoder (saved in `folder`) frames sentences in `encode`, after a reload
    and in the SavedModel (exported into `scratch`); the formats that tokenize outside the
    model refuse it in one line."""
    import numpy as np
    import tensorflow as tf

    from keras_sentemb.export.huggingface import NotExportableError
    from keras_sentemb.export.huggingface import export_huggingface
    from keras_sentemb.export.keras_hub_preset import check_keras_hub_exportable
    from keras_sentemb.export.litert import check_litert_exportable
    from keras_sentemb.export.saved_model import export_saved_model
    from keras_sentemb.methods.prompt_bert.config import BERT_TEMPLATE
    from keras_sentemb.models import SentenceEncoder

    assert encoder.prompt.template == BERT_TEMPLATE and encoder.pooling == "mask"
    vectors = encoder.encode(SENTENCES, precision="float32")
    mask_id = int(encoder.tokenizer.mask_token_id)
    for text, vector in zip(SENTENCES, vectors):
        ids = _framed(encoder, encoder.prompt, text, encoder.max_length)
        last = encoder.hidden_states({"token_ids": tf.constant([ids]),
                                      "padding_mask": tf.ones([1, len(ids)], tf.int32)})[-1]
        want = last[0, ids.index(mask_id)].numpy()
        if encoder.normalize:
            want = want / np.linalg.norm(want)
        assert float(want @ vector / np.linalg.norm(want) / np.linalg.norm(vector)) > 1 - 1e-5
    again = SentenceEncoder.from_preset(str(folder))
    assert again.prompt == encoder.prompt and again.pooling == "mask"
    np.testing.assert_allclose(again.encode(SENTENCES, precision="float32"), vectors,
                               rtol=1e-5, atol=1e-6)
    for check in (lambda: export_huggingface(encoder, scratch / "hf", verify=False),
                  lambda: check_litert_exportable(encoder),
                  lambda: check_keras_hub_exportable(encoder)):
        try:
            check()
        except NotExportableError as error:
            assert "prompt" in str(error) and "\n" not in str(error), error
        else:
            raise AssertionError("a prompt encoder must be refused")
    # Verified against `encode` as it exports; chunked requests (3 rows a chunk) frame alike.
    export_saved_model(encoder, str(scratch / "served"), chunk_size=3)
    served = tf.saved_model.load(str(next((scratch / "served").iterdir())))
    got = served.signatures["serving_default"](tf.constant(SENTENCES))["embeddings"].numpy()
    cos = np.sum(got * vectors, 1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(vectors, axis=1))
    assert cos.min() > 1 - 1e-4, cos


def check_the_given_model_is_a_candidate(encoder):
    """A model with its own pooling that reads dev better than every template checkpoint is
    returned as it was given: its weights, its pooling, no template."""
    import numpy as np

    from keras_sentemb.methods.prompt_bert import fit_promptbert

    given = encoder.clone("given")
    given.pooling = "mean"
    given.prompt = None
    texts = [f"{a} {b} ." for a in ("a man", "the cat", "a woman", "the dog")
             for b in ("plays", "sits on the mat", "runs in the park")]
    vectors = given.encode(texts, precision="float32")
    # Gold scores are the given model's own cosines: it scores Spearman 100 on this dev set.
    pairs = [(texts[i], texts[j], float(vectors[i] @ vectors[j] / np.linalg.norm(vectors[i])
                                        / np.linalg.norm(vectors[j])))
             for i in range(len(texts)) for j in range(i + 1, len(texts)) if (i + j) % 3 == 0]
    kept = fit_promptbert(texts * 4, model=given, steps=2, batch_size=4, max_length=16,
                          dev=pairs, eval_every=1, learning_rate=1e-3, verbose=0, seed=1)
    assert kept.prompt is None and kept.pooling == "mean"
    report = kept.training_report
    assert report.extras["given_model_dev"] > 99.99 and "as given" in report.pooling_reason
    np.testing.assert_allclose(kept.encode(texts, precision="float32"), vectors, rtol=1e-5,
                               atol=1e-6)


def check(encoder, folder):
    """PromptBERT's own checks, on the tiny run's encoder (its tokenizer and weights)."""
    check_template_inputs()
    check_packing(encoder)
    check_trainer_loss(encoder)
    scratch = folder.parent / "promptbert_checks"
    scratch.mkdir(exist_ok=True)
    check_views_in_the_pipeline(encoder, scratch)
    check_saved_encoder(encoder, folder, scratch)
    check_the_given_model_is_a_candidate(encoder)


def reference(encoder, folder, worker):
    """The loss equals the official arithmetic in PyTorch over transformers' BERT, same weights."""
    from pathlib import Path

    import numpy as np

    from keras_sentemb.export.huggingface import export_huggingface
    from keras_sentemb.methods.prompt_bert.trainer import PromptBERT

    export_huggingface(encoder, folder / "hf", format="transformers", verify=False)
    trainer = PromptBERT(encoder)
    batch = {"sentence": encoder.preprocess(SENTENCES, 16),
             "positive": encoder.preprocess(SENTENCES, 16, trainer.positive_prompt)}
    z = trainer.embed_batch(batch, training=True, dropout=False)
    ours = float(trainer.loss_from_embeddings(z, batch).loss)
    bodies = [_ids(encoder, s)[:14] for s in SENTENCES]
    width = max(map(len, bodies))
    arrays = {
        "bodies": np.array([b + [-1] * (width - len(b)) for b in bodies], np.int64),
        "prefix": np.array(encoder.prompt.prefix, np.int64),
        "suffix": np.array(encoder.prompt.suffix, np.int64),
        "prefix2": np.array(trainer.positive_prompt.prefix, np.int64),
        "suffix2": np.array(trainer.positive_prompt.suffix, np.int64),
        "special": np.array([encoder.start_token_id, encoder.end_token_id, encoder.pad_token_id,
                             encoder.tokenizer.mask_token_id], np.int64),
        "mlp_kernel": trainer.mlp.dense.kernel.numpy(), "mlp_bias": trainer.mlp.dense.bias.numpy(),
    }
    answer, _ = worker.call(Path(__file__).with_name("torch_reference.py"), "promptbert_loss",
                            folder=folder / "hf", temperature=trainer.config.temperature,
                            inputs=worker.save_inputs(**arrays))
    for key, theirs in (("sentence", answer["z1"]), ("positive", answer["z2"])):
        theirs = np.asarray(theirs)
        error = np.linalg.norm(z[key].numpy() - theirs, axis=1) / np.linalg.norm(theirs, axis=1)
        assert error.max() <= 1e-4, (key, error)
    # The loss is small (the views nearly agree at temperature 0.05), so its relative error is
    # the vectors' amplified by the logits' scale.
    assert abs(ours - answer["loss"]) <= 1e-3 * abs(answer["loss"]), (ours, answer["loss"])


METHOD_TEST = MethodTest(make_trainer=_trainer, check=check, reference=reference)

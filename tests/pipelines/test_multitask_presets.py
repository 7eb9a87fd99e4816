"""The report's "3 Given" schedule, plain MLP heads and the fit_multitask preset (tiny models)."""

import math

import numpy as np
import pytest
import tensorflow as tf

from keras_sentemb.data.multitask import load_multitask_data
from keras_sentemb.methods.multitask import fit_multitask
from keras_sentemb.methods import get_method
from keras_sentemb.methods.runner import split_options
from keras_sentemb.methods.multitask.three_given import stage_steps
from keras_sentemb.methods.multitask.three_given import three_given_stages
from keras_sentemb.methods.multitask.trainer import MultitaskModel
from tests.conftest import make_tiny_encoder
from tests.helpers.files import write_multitask_folder


@pytest.fixture
def folder(tmp_path):
    return write_multitask_folder(tmp_path / "multitask")


def test_three_given_schedule_is_supervised_quora_then_sst_then_sts(folder):
    train = load_multitask_data(folder, verbose=False)["train"]
    stages = three_given_stages(train, epochs=2)
    assert [(e, s, m) for e, s, m, _ in stages] == [
        (0, "quora", "sup"), (0, "sst", "unsup"), (0, "sts", "unsup"),
        (1, "quora", "sup"), (1, "sst", "unsup"), (1, "sts", "unsup"),
    ]
    quora, sst, sts = (cols for _, _, _, cols in stages[:3])
    paraphrases = {(a, b) for a, b, y in train["paraphrase"] if y >= 0.5}
    assert set(zip(quora["sent0"], quora["sent1"])) == paraphrases  # positives: label 1 only
    non_paraphrase = {s for a, b, y in train["paraphrase"] if y < 0.5 for s in (a, b)}
    assert set(quora["hard_neg"]) <= non_paraphrase  # negatives: from label-0 pairs
    assert sst["sentence"] == list(dict.fromkeys(s for s, _ in train["sentiment"]))
    assert set(sts["sentence"]) == {s for a, b, _ in train["similarity"] for s in (a, b)}
    assert len(three_given_stages(train)) == 15  # the report's 5 epochs


def test_stage_steps_full_passes_or_a_shared_budget(folder):
    train = load_multitask_data(folder, verbose=False)["train"]
    stages = three_given_stages(train, epochs=1)
    sizes = [len(next(iter(c.values()))) for *_, c in stages]
    assert stage_steps(stages, 4) == [math.ceil(n / 4) for n in sizes]
    shared = stage_steps(stages, 4, total_steps=7)
    assert sum(shared) == 7 and min(shared) >= 1
    assert shared.index(max(shared)) == sizes.index(max(sizes))
    with pytest.raises(ValueError, match="at least"):
        stage_steps(stages, 4, total_steps=2)


def test_fit_multitask_runs_the_three_given_stages_in_order(folder, tmp_path, monkeypatch):
    from keras_sentemb.methods.multitask import three_given as multitask_presets

    monkeypatch.setattr(multitask_presets, "THREE_GIVEN_EPOCHS", 1)  # 3 stages (x 5 in the report)
    path = tmp_path / "tiny"
    make_tiny_encoder(num_layers=1).save(path)
    model = fit_multitask(str(folder), model=str(path), steps=2, batch_size=4, max_length=16,
                          pretrain="three_given", pretrain_steps=3, dev=None, verbose=0,
                          head_style="plain", dropout=0.3, seed=1)
    report = model.training_report
    schedule = report.extras["pretraining"]["schedule"]
    assert [(s["epoch"], s["stage"]) for s in schedule[:3]] == [
        (1, "quora"), (1, "sst"), (1, "sts")]
    assert len(schedule) == 3
    assert [s["mode"] for s in schedule] == ["sup", "unsup", "unsup"]
    stages = [s["stage"] for s in report.extras["stages"]]
    assert stages == ["pretrain_e1_quora", "pretrain_e1_sst", "pretrain_e1_sts", "multitask"]
    assert [s["steps_trained"] for s in report.extras["stages"]] == [1, 1, 1, 2]
    assert model.head_style == "plain" and model.dropout_rate == 0.3


def test_plain_heads_are_two_layer_mlps_closed_form():
    encoder = make_tiny_encoder()
    plain = MultitaskModel(encoder, head_style="plain", hidden_dim=8, dropout=0.3)
    residual = MultitaskModel(encoder, hidden_dim=8)
    x = tf.constant(np.random.default_rng(0).normal(size=(3, 32)), tf.float32)

    def mlp(model, x):
        first, second = model.similarity_first, model.similarity_second
        hidden = np.maximum(x @ first.kernel.numpy() + first.bias.numpy(), 0)
        return hidden @ second.kernel.numpy() + second.bias.numpy()

    u, _ = plain.similarity_vectors(x, x, training=False)
    np.testing.assert_allclose(u.numpy(), mlp(plain, x.numpy()), rtol=1e-5, atol=1e-6)
    assert np.abs(plain.similarity_second.kernel.numpy()).max() > 0  # not zero-initialised
    u, _ = residual.similarity_vectors(x, x, training=False)
    np.testing.assert_allclose(u.numpy(), x.numpy() + mlp(residual, x.numpy()), rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(u.numpy(), x.numpy(), atol=1e-6)  # W2 starts at zero
    assert plain.head_config()["head_style"] == "plain"
    with pytest.raises(ValueError, match="head_style"):
        MultitaskModel(encoder, head_style="deep")


def test_plain_heads_save_and_reload(tmp_path):
    model = MultitaskModel(make_tiny_encoder(), head_style="plain", hidden_dim=8)
    model.encoder.save(tmp_path / "m")
    model.save_heads(tmp_path / "m")
    loaded = MultitaskModel.load_from_folder(tmp_path / "m")
    assert loaded.head_style == "plain"
    a = model.predict_similarity(["hello world"], ["a man plays"])
    b = loaded.predict_similarity(["hello world"], ["a man plays"])
    np.testing.assert_allclose(a, b, rtol=1e-5)


def test_three_given_preset_is_the_reports_setting():
    method = get_method("multitask")
    preset = method.presets["three_given"].values
    assert (preset["pretrain"], preset["pretrain_learning_rate"], preset["learning_rate"],
            preset["dropout"], preset["head_style"], preset["batch_size"]) == (
        "three_given", 2e-5, 1e-5, 0.3, "plain", 16)
    run_arguments, config = split_options(method, {"dropout": 0.1}, "three_given")
    assert (config.dropout, config.pretrain, run_arguments["batch_size"]) == (0.1, "three_given", 16)
"""The recipes' paper configurations: `parse_args([])` against the papers' values.

Fast: imports each recipe and calls its argument parser (no model, no training).
The table below is written independently of the recipes' own `PAPER` tables,
from the official scripts (commits named), so a recipe whose defaults drift
from its paper fails here.
"""

import importlib.util
from pathlib import Path

import pytest

RECIPES = Path(__file__).resolve().parents[1] / "recipes"

# recipe -> {argparse dest: the paper's value}. Sources:
#   simcse: princeton-nlp/SimCSE@49fa580 run_unsup_example.sh (bert-base-uncased, batch 64,
#           lr 3e-5, max_seq_length 32, temp 0.05, pooler cls, mlp_only_train, eval_steps 125)
#   consert: the paper's section 4.1 (batch 96, lr 5e-7, max 64, eval 200 with the best dev
#           checkpoint, temp 0.1, 10 % warm-up, last-two-layer evaluation), section 5 / Figure 5
#           (shuffle + feature cutoff); yym6472/ConSERT@03c9e8f scripts/unsup-consert-base.sh
#           where the paper is silent (10 epochs, patience 10, seed 1) and main.py (mean pooling)
#   sg: galsang/SG-BERT@23d5ebe training.py (SG-OPT, cls, lr 5e-5, batch 16, T 0.01, lamb 0.1,
#       eval 50, es 10, 1 epoch, 10 % warm-up) and modules.py (max_seq_length 128);
#       loss.py (head width 4096); the paper's section 3.1 (max view pooling), section 4.1 and
#       Table 8 (8 runs, seeds 1, 2, 3, 4, 1234, 2345, 3456, 7890)
#   ct: the paper (Carlsson et al. 2021) section 5: batch 16, K 7, RMSprop from 1e-5, 50,000
#       steps, no validation, the worst of the two towers reported; section 4 / App. A.1: dot
#       logits, mean pooling, (s, negative) pairs; where the paper is silent
#       FreddeFrallan/Contrastive-Tension@75293a8 (max 75, dropout off, evaluation every 500)
#   multitask: the report's section 4.1 ('3 Given': Quora with negatives, then SST, then STS),
#       section 5.3 (5 pre-training epochs, temperature 0.05, batch 16, lr 1e-5, 10 epochs,
#       MLP heads with dropout 0.3), Table 10 (pre-training lr 2e-5), section 4.2 (shared
#       first layer, average loss); gpoesia/minbert-default-final-project@7ac8260 (bert-base)
#   parallel: the paper's section 4.2.2 / Table 6 (BERT-base: lr 2e-4, batch 400, queue 10,000),
#       section 4.2.1 (length 50, dev every 250, SimCSE-RoBERTa-large teacher: here a trained
#       encoder, --teacher), 'temperature is parameter 1 (a learnable parameter in training)',
#       section 4.2.3 (NLI: lr 1e-5, batch 128), Appendix C (MLP kept after NLI), Figure 4 (every
#       100 steps), section 4.4.2 / Table 5 (objective comparison: lr 2e-4, batch 128, queue 0)
#   ct_sts_regression: the CT paper's section 5.2 / Table 2 (model-specific labels, 20
#       right-closed buckets of STS-B train, 10 runs x 8 epochs, the run best on dev reported)
PAPERS = {
    "simcse": dict(model="bert_base_en_uncased", batch_size=64, learning_rate=3e-5,
                   max_length=32, temperature=0.05, pooling="cls", mlp="train",
                   eval_every=125, steps=None, seeds=1, smoke=False),
    "consert": dict(model="bert_base_en_uncased", batch_size=96, learning_rate=5e-7,
                    max_length=64, temperature=0.1, eval_every=200, epochs=10, patience=10,
                    warmup_ratio=0.1, seed=1, pooling="mean", views="shuffle,feature_cutoff",
                    texts="all", steps=None, seeds=1, smoke=False, eval_pooling="mean_last2",
                    dropout_mode="exact", sts_data=None),
    "sg": dict(model="bert_base_en_uncased", loss="opt3", pooling="cls", learning_rate=5e-5,
               batch_size=16, temperature=0.01, reg_weight=0.1, min_layer=0, eval_every=50,
               patience=10, seed=None, seed_list="1,2,3,4,1234,2345,3456,7890", epochs=1,
               warmup_ratio=0.1, max_length=128, view_pooling="max", projection_dim=4096,
               no_head=False, steps=None, seeds=8, smoke=False),
    "ct": dict(model="bert_base_en_uncased", batch_size=16, negatives="k7", max_length=75,
               learning_rate=1e-5, logits="dot", pooling="mean", dropout=False, steps=50000,
               eval_every=500, protocol="paper", keep="worst", negatives_layout="paper",
               seeds=1, smoke=False),
    "multitask": dict(model="bert_base_en_uncased", dropout=0.3, batch_size=16,
                      learning_rate=1e-5, head_learning_rate=1e-5, pooling="cls", epochs=10,
                      pretrain="three_given", pretrain_learning_rate=2e-5, temperature=0.05,
                      head_style="plain", head_sharing="first_layer", procedures="average",
                      fusion=False, smoke=False),
    "parallel": dict(eval_every=250, preset="main", smoke=False, learning_rate=2e-4,
                     batch_size=400, queue_size=10000, max_length=50, temperature="learnable",
                     teacher="default", init_temperature=1.0, nli_mlp="keep",
                     nli_learning_rate=1e-5, nli_batch_size=128, track_every=100),
    "ct_sts_regression": dict(model="bert_base_en_uncased", labels=["model_specific"],
                              num_buckets=20, epochs=8, seeds=10, steps=None, smoke=False,
                              report="best_on_dev", spread_data="train"),
}
BASE_PRESETS = {"bert_base_en_uncased", "bert_base_multi", "roberta_base_en"}


def load(name):
    spec = importlib.util.spec_from_file_location(f"recipe_{name}", RECIPES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", sorted(PAPERS))
def test_defaults_are_the_papers(name):
    args = vars(load(name).parse_args([]))
    expected = PAPERS[name]
    assert {k: args[k] for k in expected} == expected
    assert args["model"] in BASE_PRESETS  # a keras-hub preset of the paper's family


@pytest.mark.parametrize("name", sorted(PAPERS))
def test_one_paper_table_drives_defaults_and_help(name, capsys):
    recipe = load(name)
    args = vars(recipe.parse_args([]))
    for key, setting in recipe.PAPER.items():
        assert setting.source.strip(), key
        if key in args:
            assert args[key] == setting.value or args[key] == [setting.value], key
    with pytest.raises(SystemExit):
        recipe.parse_args(["--help"])
    text = capsys.readouterr().out
    assert "The paper's main setting" in text and "What differs here" in text
    for key in recipe.PAPER:
        assert key in text


def test_parallel_objective_comparison_preset():
    parallel = load("parallel")
    args = parallel.parse_args(["--preset", "objective-comparison"])
    assert (args.learning_rate, args.batch_size, args.queue_size) == (2e-4, 128, 0)
    args = parallel.parse_args(["--preset", "objective-comparison", "--batch-size", "32"])
    assert (args.learning_rate, args.batch_size, args.queue_size) == (2e-4, 32, 0)


def test_ct_protocols_and_sg_head_flags():
    ct = load("ct").parse_args(["--protocol", "safe", "--keep", "tower1"])
    assert (ct.protocol, ct.keep) == ("safe", "tower1")
    assert load("sg").parse_args(["--no-head"]).no_head is True


def test_seed_summary_is_mean_and_sample_std():
    paper = load("simcse").summarize_seeds
    runs = [{"a": 1.0, "b": {"c": 2.0}}, {"a": 3.0, "b": {"c": 2.0}}]
    assert paper(runs, ["a", "b.c"]) == {
        "a": {"mean": 2.0, "std": 1.41, "n": 2},
        "b.c": {"mean": 2.0, "std": 0.0, "n": 2},
    }

"""benchmarks/methods_table.py: what it tries per method and how it names the choice; cpu_info."""

import pytest

from tests.helpers.processes import load_benchmark


@pytest.fixture(scope="module")
def table():
    return load_benchmark("methods_table")


def test_every_variant_is_tried_by_default_and_can_be_narrowed(table):
    assert table.parse_variants(None) == {"ct_in_batch": ["no_dropout", "dropout"]}
    assert table.parse_variants("ct_in_batch=dropout_clipped") == {"ct_in_batch": ["dropout_clipped"]}
    assert table.VARIANTS["ct_in_batch"]["dropout_clipped"] == {"dropout": True, "max_grad_norm": 1.0}
    assert table.parse_variants("ct_in_batch=dropout") == {"ct_in_batch": ["dropout"]}
    with pytest.raises(SystemExit, match="unknown variant"):
        table.parse_variants("ct_in_batch=dropout,sideways")
    assert table.VARIANTS["ct_in_batch"]["dropout"] == {"dropout": True}
    assert table.VARIANTS["ct_in_batch"]["no_dropout"] == {"dropout": False}


def test_learning_rates_override_one_method_only(table):
    rates = table.parse_rates("simcse=3e-5,1e-4")
    assert rates["simcse"] == [3e-5, 1e-4]
    assert rates["ct_k7"] == table.DEFAULT_RATES["ct_k7"]


def test_a_registered_method_without_a_rate_here_tries_its_own_default(table):
    from keras_sentemb.methods import get_method

    rates = table.parse_rates("tsdae=1e-4")
    assert table.default_rates("tsdae", rates) == [1e-4]
    assert table.default_rates("esimcse", table.parse_rates(None)) == [
        get_method("esimcse").run_defaults["learning_rate"]]
    assert table.default_rates("simcse", rates) == table.DEFAULT_RATES["simcse"]
    with pytest.raises(SystemExit):
        table.main(["--steps", "1001"])  # the table's budget is at most 1,000 steps


def test_markdown_names_the_dev_chosen_variant_and_the_reference(table):
    start = {"pooling": "mean", "dev": 75.77, "test": 65.54}
    rows = [
        {"method": "ct_in_batch", "variant": "dropout", "batch_size": 64, "max_length": 32,
         "pooling": "mean", "learning_rate": 5e-5, "kept_step": 250, "dev": 83.8, "test": 79.58},
        {"method": "consert", "variant": None, "batch_size": 64, "max_length": 32,
         "pooling": "mean", "learning_rate": 3e-5, "kept_step": 250, "dev": 84.8, "test": 81.2},
    ]
    lines = table.markdown(rows, start, 250).splitlines()
    assert lines[2].startswith("| start (no training) |") and "75.77 | 65.54" in lines[2]
    assert "CT, in-batch negatives (dropout, chosen on dev)" in lines[3]
    assert lines[3].endswith("| 84.23 / 79.99 |")
    assert "ConSERT (shuffle + feature cutoff) |" in lines[4]
    assert lines[4].endswith("| (no such loss) |")


def test_cpu_info_names_the_vector_instructions():
    info = load_benchmark("_common").cpu_info()
    assert info["cpus"] >= 1
    assert set(info["cpu_flags"]) == {
        "avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16", "amx_int8", "amx_tile"
    }
    assert all(isinstance(v, bool) for v in info["cpu_flags"].values())

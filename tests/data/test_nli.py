"""Readers of NLI triplets and labelled paraphrase pairs."""

import pytest

from keras_sentemb.data.nli import load_supervised
from keras_sentemb.data.nli import read_labeled_pairs
from keras_sentemb.data.nli import read_nli_triplets
from keras_sentemb.data.nli import triplets_to_nli_pairs
from tests.conftest import SHARED


def test_shared_files():
    """The project's upstream files (../shared/data), when this checkout has them.

    Users and a bare CI checkout do not: the readers' behaviour on malformed
    rows is covered by the synthetic files below; this only pins the real
    files' counts.
    """
    path = SHARED / "data" / "nli" / "snli_devtest_triplets.csv"
    quora = SHARED / "data" / "multitask" / "quora-dev.csv"
    if not path.exists() or not quora.exists():
        pytest.skip("shared data not present")
    triplets, skipped = read_nli_triplets(path, return_skipped=True)
    assert (len(triplets), skipped) == (5672, 0)
    pairs, skipped = read_labeled_pairs(quora, return_skipped=True)
    assert (len(pairs), skipped) == (20212, 2)  # 2 malformed rows upstream
    assert {p[2] for p in pairs} == {0, 1}
    assert load_supervised(str(path))[0] == "triplets"
    assert load_supervised(str(quora))[0] == "labeled_pairs"


def test_malformed_rows_are_counted(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text('sent0,sent1,hard_neg\na,b,c\n"x, y",z,\nd,e,f\n')
    assert read_nli_triplets(f, return_skipped=True) == ([("a", "b", "c"), ("d", "e", "f")], 1)
    g = tmp_path / "p.tsv"
    g.write_text("\tid\tsentence1\tsentence2\tis_duplicate\n0\tq\ta?\tb?\t1.0\n1\tr\tc\td\t\n2\ts\te\tf\tcontradiction\n")
    assert read_labeled_pairs(g, return_skipped=True) == ([("a?", "b?", 1), ("e", "f", 2)], 1)
    with pytest.raises(ValueError, match="sent0"):
        (tmp_path / "bad.csv").write_text("a,b\n1,2\n")
        read_nli_triplets(tmp_path / "bad.csv")


def test_triplets_to_pairs():
    assert triplets_to_nli_pairs([("p", "e", "c")]) == [("p", "e", 0), ("p", "c", 2)]

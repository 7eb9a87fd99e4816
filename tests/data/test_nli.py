"""Readers of NLI triplets and labelled paraphrase pairs."""

import pytest

from keras_sentemb.data.nli import load_supervised
from keras_sentemb.data.nli import read_labeled_pairs
from keras_sentemb.data.nli import read_nli_triplets
from keras_sentemb.data.nli import triplets_to_nli_pairs


def test_quora_rows_with_unbalanced_quotes_are_skipped(tmp_path):
    """Upstream quora-dev.csv has 2 rows whose unbalanced quote swallows the next
    fields (the label ends up empty); they are skipped and counted, the rows
    around them survive, and the kind of file is recognised."""
    f = tmp_path / "quora-dev.csv"
    f.write_text(
        "\tid\tsentence1\tsentence2\tis_duplicate\n"
        "0\ta1\tHow do I cook rice?\tHow to cook rice?\t1.0\n"
        '1\ta2\t"Why is the sky blue?\tWhat makes the sky blue?\t1.0\n'
        "2\ta3\tWhat is AI?\tWhere is Paris?\t0.0\n",
        encoding="utf-8",
    )
    pairs, skipped = read_labeled_pairs(f, return_skipped=True)
    assert skipped == 1
    assert pairs == [("How do I cook rice?", "How to cook rice?", 1)]
    assert load_supervised(str(f))[0] == "labeled_pairs"
    triplets = tmp_path / "nli.csv"
    triplets.write_text("sent0,sent1,hard_neg\np,e,c\n", encoding="utf-8")
    assert load_supervised(str(triplets)) == ("triplets", [("p", "e", "c")])


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


def test_positive_pairs_from_tsv_csv_and_lists(tmp_path):
    from keras_sentemb.data.nli import load_positive_pairs

    tsv = tmp_path / "bt.tsv"
    tsv.write_text("a man sleeps\ta man is sleeping\nno tab\n\nthe cat\tthe kitten\n",
                   encoding="utf-8")
    assert load_positive_pairs(tsv) == [("a man sleeps", "a man is sleeping"),
                                        ("the cat", "the kitten")]
    csv = tmp_path / "bt.csv"
    csv.write_text("sent0,sent1,hard_neg\na,b,c\nd,,f\ng,h,i\n", encoding="utf-8")
    assert load_positive_pairs(str(csv)) == [("a", "b"), ("g", "h")]
    assert load_positive_pairs([("x", "y")]) == [("x", "y")]
    with pytest.raises(ValueError, match=r"pairs of str; received \('x',\)"):
        load_positive_pairs([("x",)])
    with pytest.raises(ValueError, match="non-empty list"):
        load_positive_pairs([])
    with pytest.raises(FileNotFoundError, match="Pair file not found"):
        load_positive_pairs(tmp_path / "missing.tsv")

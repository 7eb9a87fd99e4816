"""`sts_unlabeled_texts`: ConSERT's unsupervised corpus from the STS sets a user supplies."""

import pytest

from keras_sentemb.evaluation.sts_corpus import sts_unlabeled_texts
from tests.helpers.corpora import (
    SICK_TEST, SICK_TRIAL, STS12_A, STS12_B, STSB_DEV, STSB_TEST, STSB_TRAIN,
)


def _sentences(*pair_lists):
    out = []
    for pairs in pair_lists:
        for s1, s2, score in pairs:
            if score is not None:
                out.extend([s1, s2])
    return list(dict.fromkeys(out))


def test_every_split_of_every_set_without_labels(downstream):
    sentences, counts = sts_unlabeled_texts(downstream)
    assert set(counts) == {"STS12", "STSBenchmark", "SICKRelatedness"}
    assert counts["STS12"] == {"splits": ["test"], "sentences": 2 * (3 + 6)}
    assert counts["STSBenchmark"]["splits"] == ["train", "dev", "test"]
    assert counts["STSBenchmark"]["sentences"] == 2 * (len(STSB_TRAIN) + len(STSB_DEV) + len(STSB_TEST))
    # SICK: train, trial (dev) and test files.
    assert counts["SICKRelatedness"]["splits"] == ["train", "dev", "test"]
    expected = set(_sentences(STS12_A, STS12_B, STSB_TRAIN, STSB_DEV, STSB_TEST, SICK_TEST, SICK_TRIAL))
    assert set(sentences) == expected and len(sentences) == len(expected)  # distinct
    assert "UNSCORED pair one ." not in sentences  # SentEval skips unscored pairs


def test_missing_sets(tmp_path, downstream):
    only_stsb, counts = sts_unlabeled_texts(downstream, tasks=["stsb"])
    assert list(counts) == ["STSBenchmark"] and len(only_stsb) == len(
        _sentences(STSB_TRAIN, STSB_DEV, STSB_TEST))
    with pytest.raises(FileNotFoundError):
        sts_unlabeled_texts(downstream, missing="raise")  # STS13-16 are not there
    with pytest.raises(FileNotFoundError, match="No STS set"):
        sts_unlabeled_texts(tmp_path)
    with pytest.raises(ValueError, match="missing"):
        sts_unlabeled_texts(downstream, missing="ignore")

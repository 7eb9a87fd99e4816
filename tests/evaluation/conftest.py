"""Fixtures of the evaluation tests."""

import pytest

from tests.helpers.corpora import STS12_A, STS12_B, STSB_DEV, STSB_TEST, STSB_TRAIN
from tests.helpers.files import write_sick, write_sts_year, write_stsb


@pytest.fixture
def downstream(tmp_path):
    """A SentEval-style downstream/ folder with STS/ and SICK/."""
    root = tmp_path / "downstream"
    write_stsb(
        root / "STS" / "STSBenchmark",
        {"train": STSB_TRAIN, "dev": STSB_DEV, "test": STSB_TEST},
    )
    write_sts_year(root / "STS" / "STS12-en-test", {"A": STS12_A, "B": STS12_B})
    write_sick(root / "SICK")
    return root

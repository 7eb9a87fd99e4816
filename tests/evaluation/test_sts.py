"""Tests for keras_sentemb.evaluation.sts / readers (numpy + scipy only)."""

import collections
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from keras_sentemb.evaluation import readers
from keras_sentemb.evaluation import sts
from keras_sentemb.evaluation.readers import read_sick
from keras_sentemb.evaluation.readers import read_sts_folder
from keras_sentemb.evaluation.readers import read_stsb
from keras_sentemb.evaluation.sts import cosine_scores
from keras_sentemb.evaluation.sts import evaluate_sts
from keras_sentemb.evaluation.sts import load_sts_pairs
from tests.helpers.corpora import SICK_TEST, SICK_TRIAL, STS12_A, STS12_B, STSB_DEV, STSB_TEST, STSB_TRAIN
from tests.helpers.files import write_sick, write_sts_year, write_stsb
from tests.helpers.models import DIM, FakeEncoder, bag_of_chars

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED_STS = (REPO_ROOT / ".." / "shared" / "data" / "STS").resolve()
PACKAGED_STS = REPO_ROOT / "keras_sentemb" / "resources" / "STS"  # shipped: STS-B dev + test


def expected_correlations(pairs):
    """Spearman / Pearson x100 computed independently of the module."""
    a = np.stack([bag_of_chars(p[0]) for p in pairs]).astype(np.float64)
    b = np.stack([bag_of_chars(p[1]) for p in pairs]).astype(np.float64)
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    gold = np.array([p[2] for p in pairs])
    return (
        100 * stats.spearmanr(cos, gold)[0],
        100 * stats.pearsonr(cos, gold)[0],
    )


def assert_corr(result, pairs):
    spearman, pearson = expected_correlations(pairs)
    assert result["n"] == len(pairs)
    assert result["spearman"] == pytest.approx(spearman, abs=1e-9)
    assert result["pearson"] == pytest.approx(pearson, abs=1e-9)


# --- tiny datasets --------------------------------------------------------


def write_stsb_original(folder):
    """Original-release style: 7, 8 and 9 column lines, quotes, no header."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for i, (s1, s2, score) in enumerate(STSB_TEST):
        base = f"main-forums\tanswer-answer\t2016\t{i:04d}\t{score:g}\t{s1} \t{s2}"
        if i % 3 == 1:
            base += "\tStackExchange: http://x.example/1 Author: A"
        elif i % 3 == 2:
            base += '\tsource "one\tsource two" (quoted)'
        lines.append(base)
    (folder / "sts-test.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")


def scored(pairs):
    return [p for p in pairs if p[2] is not None]


# --- cosine ---------------------------------------------------------------


def test_cosine_scores_values_and_zero_vectors():
    a = np.array([[1.0, 0.0], [3.0, 4.0], [0.0, 0.0], [0.0, 0.0], [1.0, 1.0]])
    b = np.array([[1.0, 1.0], [-3.0, -4.0], [1.0, 2.0], [0.0, 0.0], [2.0, 2.0]])
    out = cosine_scores(a, b)
    assert out.shape == (5,)
    np.testing.assert_allclose(out, [1 / math.sqrt(2), -1.0, 0.0, 0.0, 1.0])
    assert not np.any(np.isnan(out))


def test_cosine_scores_shape_errors():
    with pytest.raises(ValueError, match="same shape"):
        cosine_scores(np.ones((2, 3)), np.ones((3, 3)))
    with pytest.raises(ValueError, match="2-D"):
        cosine_scores(np.ones(3), np.ones(3))


def test_zero_embeddings_give_zero_cosine_in_evaluation(tmp_path):
    folder = tmp_path / "STSBenchmark"
    write_stsb(folder, {"test": STSB_TEST})

    def encode(sentences):
        # First sentence of the file gets a zero vector.
        return np.stack(
            [
                np.zeros(DIM, np.float32)
                if s == STSB_TEST[0][0]
                else bag_of_chars(s)
                for s in sentences
            ]
        )

    result = evaluate_sts(encode, folder)
    a = np.stack([bag_of_chars(p[0]) for p in STSB_TEST]).astype(np.float64)
    a[0] = 0
    b = np.stack([bag_of_chars(p[1]) for p in STSB_TEST]).astype(np.float64)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    cos = np.where(norms > 0, (a * b).sum(1) / np.where(norms > 0, norms, 1), 0.0)
    assert cos[0] == 0.0
    gold = [p[2] for p in STSB_TEST]
    assert result["STSBenchmark"]["test"]["spearman"] == pytest.approx(
        100 * stats.spearmanr(cos, gold)[0]
    )


# --- readers --------------------------------------------------------------


def test_read_stsb_senteval_layout(tmp_path):
    write_stsb(tmp_path / "STS" / "STSBenchmark", {"test": STSB_TEST, "dev": STSB_DEV})
    for where in (
        tmp_path,
        tmp_path / "STS",
        tmp_path / "STS" / "STSBenchmark",
        tmp_path / "STS" / "STSBenchmark" / "sts-test.csv",
    ):
        assert read_stsb(where, "test") == STSB_TEST
    assert read_stsb(tmp_path / "STS", "dev") == STSB_DEV
    # The quote character is ordinary text.
    assert read_stsb(tmp_path / "STS")[3][0] == 'he said "no" .'


def test_read_stsb_original_8_9_columns(tmp_path):
    folder = tmp_path / "STSBenchmark-original"
    write_stsb_original(folder)
    columns = [
        len(line.split("\t"))
        for line in (folder / "sts-test.csv").read_text().splitlines()
    ]
    assert set(columns) == {7, 8, 9}
    pairs = read_stsb(folder, "test")
    assert pairs == STSB_TEST  # trailing spaces stripped, quotes kept
    # Also found from the parent folder when STSBenchmark is absent.
    assert read_stsb(tmp_path, "test") == STSB_TEST


def test_read_stsb_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="sts-dev.csv"):
        read_stsb(tmp_path, "dev")
    bad = tmp_path / "sts-test.csv"
    bad.write_text("a\tb\tc\n", encoding="utf-8")
    with pytest.raises(ValueError, match="7 tab-separated"):
        read_stsb(bad)
    with pytest.raises(ValueError, match="Unknown split"):
        read_stsb(tmp_path, "validation-set")


def test_read_stsb_decodes_invalid_utf8_with_replacement(tmp_path):
    path = tmp_path / "sts-test.csv"
    path.write_bytes(b"g\tf\t2012\t0001\t3.0\tcaf\xe9 time\tcoffee time\n")
    ((s1, s2, score),) = read_stsb(path)
    assert s1 == "caf\ufffd time" and s2 == "coffee time" and score == 3.0


def test_read_sts_folder_skips_unscored(tmp_path):
    folder = tmp_path / "STS12-en-test"
    write_sts_year(folder, {"A": STS12_A, "surprise.OnWN": STS12_B})
    subsets = read_sts_folder(folder)
    assert list(subsets) == ["A", "surprise.OnWN"]
    assert subsets["A"] == scored(STS12_A)
    assert len(subsets["A"]) == 3
    assert subsets["surprise.OnWN"] == STS12_B


def test_read_sts_folder_sts2016_names_and_extra_columns(tmp_path):
    folder = tmp_path / "STS16-en-test"
    folder.mkdir()
    (folder / "STS2016.input.headlines.txt").write_text(
        "a b\tc d\tsrc1\tsrc2\ne f\tg h\tsrc3\tsrc4\n", encoding="utf-8"
    )
    (folder / "STS2016.gs.headlines.txt").write_text("3\n\n", encoding="utf-8")
    assert read_sts_folder(folder) == {"headlines": [("a b", "c d", 3.0)]}


def test_read_sts_folder_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_sts_folder(tmp_path / "nope")
    folder = tmp_path / "STS13-en-test"
    folder.mkdir()
    with pytest.raises(FileNotFoundError, match="STS.input"):
        read_sts_folder(folder)
    (folder / "STS.input.x.txt").write_text("a\tb\nc\td\n", encoding="utf-8")
    with pytest.raises(FileNotFoundError, match="STS.gs.x.txt"):
        read_sts_folder(folder)
    (folder / "STS.gs.x.txt").write_text("1\n", encoding="utf-8")
    with pytest.raises(ValueError, match="one gold line per pair"):
        read_sts_folder(folder)


def test_read_sick_splits(tmp_path):
    write_sick(tmp_path / "SICK")
    assert read_sick(tmp_path / "SICK") == SICK_TEST
    assert read_sick(tmp_path, "test") == SICK_TEST
    assert read_sick(tmp_path / "SICK", "dev") == SICK_TRIAL
    assert read_sick(tmp_path / "SICK", "trial") == SICK_TRIAL
    assert read_sick(tmp_path / "SICK", "train") == SICK_TRIAL[:2] + SICK_TEST[:2]
    assert read_sick(tmp_path / "SICK" / "SICK_trial.txt") == SICK_TRIAL
    with pytest.raises(FileNotFoundError, match="SICK_test_annotated.txt"):
        read_sick(tmp_path / "empty")


def test_load_sts_pairs(downstream):
    assert load_sts_pairs(downstream, "stsb") == STSB_TEST
    assert load_sts_pairs(downstream / "STS", "STSBenchmark", "train") == STSB_TRAIN
    everything = load_sts_pairs(downstream, "stsb", "all")
    assert everything == {"train": STSB_TRAIN, "dev": STSB_DEV, "test": STSB_TEST}
    assert load_sts_pairs(downstream, "STS12") == {
        "A": scored(STS12_A),
        "B": STS12_B,
    }
    assert load_sts_pairs(downstream, "sickr", "dev") == SICK_TRIAL
    with pytest.raises(ValueError, match="only a test split"):
        load_sts_pairs(downstream, "STS12", "dev")


# --- evaluate_sts ---------------------------------------------------------


@pytest.mark.parametrize(
    "where",
    [
        "downstream",
        "downstream/STS",
        "downstream/STS/STSBenchmark",
        "downstream/STS/STSBenchmark/sts-test.csv",
    ],
)
def test_evaluate_stsb_locations(downstream, where):
    data_dir = downstream.parent / where
    result = evaluate_sts(FakeEncoder(), data_dir, tasks="stsb")
    assert set(result) == {"protocol", "STSBenchmark", "avg", "avg_by_aggregation"}
    assert list(result["STSBenchmark"]) == ["test"]
    assert_corr(result["STSBenchmark"]["test"], STSB_TEST)
    assert result["avg"]["spearman"] == result["STSBenchmark"]["test"]["spearman"]
    assert result["avg"]["tasks"] == ["STSBenchmark"]


def test_evaluate_stsb_splits(downstream):
    result = evaluate_sts(
        FakeEncoder(), downstream, tasks=["STSBenchmark"], split="all"
    )
    assert list(result["STSBenchmark"]) == ["train", "dev", "test"]
    assert_corr(result["STSBenchmark"]["train"], STSB_TRAIN)
    assert_corr(result["STSBenchmark"]["dev"], STSB_DEV)
    assert_corr(result["STSBenchmark"]["test"], STSB_TEST)
    # avg uses the test split.
    assert result["avg"]["spearman"] == result["STSBenchmark"]["test"]["spearman"]
    dev = evaluate_sts(FakeEncoder(), downstream, tasks="stsb", split="dev")
    assert list(dev["STSBenchmark"]) == ["dev"]
    assert dev["avg"]["split"] == "dev"
    assert dev["avg"]["spearman"] == dev["STSBenchmark"]["dev"]["spearman"]


def test_evaluate_stsb_original(tmp_path):
    folder = tmp_path / "STS" / "STSBenchmark-original"
    write_stsb_original(folder)
    result = evaluate_sts(FakeEncoder(), tmp_path / "STS", tasks="stsb")
    assert_corr(result["STSBenchmark"]["test"], STSB_TEST)
    assert result["protocol"]["data"]["STSBenchmark"]["path"] == str(folder)


def test_evaluate_sts12_aggregations(downstream):
    result = evaluate_sts(FakeEncoder(), downstream, tasks="STS12")
    task = result["STS12"]
    assert set(task) == {"subsets", "all", "mean", "wmean"}
    a, b = scored(STS12_A), STS12_B
    assert_corr(task["subsets"]["A"], a)
    assert_corr(task["subsets"]["B"], b)
    assert task["subsets"]["A"]["n"] == 3 and task["subsets"]["B"]["n"] == 6
    # all: one correlation over the concatenated pairs.
    assert_corr(task["all"], a + b)
    sa, pa = expected_correlations(a)
    sb, pb = expected_correlations(b)
    assert task["mean"]["spearman"] == pytest.approx((sa + sb) / 2)
    assert task["mean"]["pearson"] == pytest.approx((pa + pb) / 2)
    assert task["wmean"]["spearman"] == pytest.approx((3 * sa + 6 * sb) / 9)
    assert task["wmean"]["pearson"] == pytest.approx((3 * pa + 6 * pb) / 9)
    assert task["mean"]["n"] == task["wmean"]["n"] == task["all"]["n"] == 9
    # The three conventions really differ on this data.
    assert abs(task["mean"]["spearman"] - task["wmean"]["spearman"]) > 1e-6
    assert abs(task["all"]["pearson"] - task["wmean"]["pearson"]) > 1e-6
    # avg follows `aggregation`.
    assert result["avg"]["spearman"] == task["all"]["spearman"]
    for agg in ("mean", "wmean"):
        other = evaluate_sts(FakeEncoder(), downstream, tasks="STS12", aggregation=agg)
        assert other["avg"]["spearman"] == pytest.approx(task[agg]["spearman"])
        assert other["avg"]["aggregation"] == agg
        assert other["protocol"]["avg_aggregation"] == agg


def test_evaluate_sts_year_folder_itself(downstream):
    result = evaluate_sts(FakeEncoder(), downstream / "STS" / "STS12-en-test")
    assert result["avg"]["tasks"] == ["STS12"]
    assert_corr(result["STS12"]["subsets"]["B"], STS12_B)


def test_evaluate_sick(downstream):
    result = evaluate_sts(FakeEncoder(), downstream, tasks="sickr")
    assert_corr(result["SICKRelatedness"]["test"], SICK_TEST)
    dev = evaluate_sts(FakeEncoder(), downstream / "SICK", tasks="sickr", split="dev")
    assert_corr(dev["SICKRelatedness"]["dev"], SICK_TRIAL)


def test_evaluate_all_tasks_found(downstream):
    result = evaluate_sts(FakeEncoder(), downstream)
    assert result["avg"]["tasks"] == ["STS12", "STSBenchmark", "SICKRelatedness"]
    mains = [
        result["STS12"]["all"],
        result["STSBenchmark"]["test"],
        result["SICKRelatedness"]["test"],
    ]
    assert result["avg"]["spearman"] == pytest.approx(
        np.mean([m["spearman"] for m in mains])
    )
    assert result["avg"]["pearson"] == pytest.approx(
        np.mean([m["pearson"] for m in mains])
    )
    protocol = result["protocol"]
    assert protocol["similarity"] == "cosine"
    assert protocol["correlations"] == "x100"
    assert protocol["aggregation"] == ["all", "mean", "wmean"]
    assert protocol["pooling"] == "mean"  # the encoder's own default
    assert protocol["data"]["STS12"]["splits"] == ["test"]
    # Plain JSON, no NaN, no numpy types.
    assert json.loads(json.dumps(result, allow_nan=False)) == result
    # Only the STS "STS" folder: SICK is not beside it in there.
    only_sts = evaluate_sts(FakeEncoder(), downstream / "STS")
    assert only_sts["avg"]["tasks"] == ["STS12", "STSBenchmark"]
    # A dev split drops the test-only STS12-16 when tasks=None.
    dev = evaluate_sts(FakeEncoder(), downstream, split="dev")
    assert dev["avg"]["tasks"] == ["STSBenchmark", "SICKRelatedness"]


def test_each_unique_sentence_encoded_once(downstream):
    # Add a second STS year that repeats sentences from STS-B and STS12.
    write_sts_year(
        downstream / "STS" / "STS13-en-test",
        {"headlines": STSB_TEST[:3] + STS12_B[:2] + [STSB_TEST[0]]},
    )
    encoder = FakeEncoder()
    result = evaluate_sts(encoder, downstream, split="all")
    assert len(encoder.calls) == 1
    counts = collections.Counter(encoder.seen)
    assert max(counts.values()) == 1
    expected = set()
    for pairs in (
        STSB_TRAIN, STSB_DEV, STSB_TEST, scored(STS12_A), STS12_B,
        SICK_TEST, SICK_TRIAL,
    ):
        for s1, s2, _ in pairs:
            expected.update((s1, s2))
    assert set(encoder.seen) == expected
    assert "UNSCORED pair one ." not in counts  # skipped pairs never encoded
    assert result["STS13"]["subsets"]["headlines"]["n"] == 6


def test_pooling_and_kwargs_passed_through(downstream):
    encoder = FakeEncoder()
    evaluate_sts(encoder, downstream, tasks="stsb", batch_size=7)
    assert encoder.calls[-1]["pooling"] is None
    assert encoder.calls[-1]["batch_size"] == 7
    result = evaluate_sts(
        encoder, downstream, tasks="stsb", pooling="cls", max_length=16
    )
    assert encoder.calls[-1]["pooling"] == "cls"
    assert encoder.calls[-1]["max_length"] == 16
    assert result["protocol"]["pooling"] == "cls"


def test_plain_callable_encoder(downstream):
    batches = []

    def encode(sentences):
        batches.append(len(sentences))
        return np.stack([bag_of_chars(s) for s in sentences])

    result = evaluate_sts(encode, downstream, tasks="stsb", batch_size=5)
    assert_corr(result["STSBenchmark"]["test"], STSB_TEST)
    assert max(batches) <= 5 and sum(batches) == len(
        {s for p in STSB_TEST for s in p[:2]}
    )
    assert result["protocol"]["pooling"] is None
    with pytest.raises(ValueError, match="pooling"):
        evaluate_sts(encode, downstream, tasks="stsb", pooling="mean")


def test_bad_encoder_output_shape(downstream):
    with pytest.raises(ValueError, match="shape"):
        evaluate_sts(lambda s: np.ones((len(s) + 1, 3)), downstream, tasks="stsb")
    with pytest.raises(TypeError):
        evaluate_sts(object(), downstream, tasks="stsb")


def test_constant_predictions_give_none_not_nan(downstream):
    result = evaluate_sts(lambda s: np.ones((len(s), 4)), downstream, tasks="stsb")
    assert result["STSBenchmark"]["test"]["spearman"] is None
    assert result["avg"]["spearman"] is None
    json.dumps(result, allow_nan=False)


def test_errors(downstream, tmp_path):
    with pytest.raises(ValueError, match="Valid tasks.*STSBenchmark.*SICKRelatedness.*STS17"):
        evaluate_sts(FakeEncoder(), downstream, tasks=["STS18"])
    with pytest.raises(FileNotFoundError, match="STS17"):
        evaluate_sts(FakeEncoder(), downstream, tasks=["STS17"])
    with pytest.raises(FileNotFoundError, match="STS14-en-test"):
        evaluate_sts(FakeEncoder(), downstream, tasks=["STS14"])
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="SICK"):
        evaluate_sts(FakeEncoder(), empty, tasks="sickr")
    with pytest.raises(FileNotFoundError, match="No STS task folder"):
        evaluate_sts(FakeEncoder(), empty)
    with pytest.raises(FileNotFoundError):
        evaluate_sts(FakeEncoder(), tmp_path / "does-not-exist")
    with pytest.raises(ValueError, match="aggregation"):
        evaluate_sts(FakeEncoder(), downstream, aggregation="median")
    with pytest.raises(ValueError, match="only a test split"):
        evaluate_sts(FakeEncoder(), downstream, tasks="STS12", split="dev")
    with pytest.raises(ValueError, match="split"):
        evaluate_sts(FakeEncoder(), downstream, tasks="stsb", split="validation-x")
    with pytest.raises(ValueError, match="batch_size"):
        evaluate_sts(FakeEncoder(), downstream, tasks="stsb", batch_size=0)
    # Missing file is reported before anything is encoded.
    encoder = FakeEncoder()
    (downstream / "STS" / "STSBenchmark" / "sts-dev.csv").unlink()
    with pytest.raises(FileNotFoundError, match="sts-dev.csv"):
        evaluate_sts(encoder, downstream, split="all")
    assert encoder.calls == []


def test_task_aliases():
    assert sts.resolve_task_name("stsb") == "STSBenchmark"
    assert sts.resolve_task_name("SICKR") == "SICKRelatedness"
    assert sts.resolve_task_name("sts12") == "STS12"
    assert sts.resolve_task_name("sts2017") == "STS17"
    with pytest.raises(ValueError):
        sts.resolve_task_name("sts18")


def test_modules_do_not_import_tensorflow():
    import ast

    for module in (sts, readers):
        tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
        imported = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imported.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module.split(".")[0])
        assert not imported & {"tensorflow", "keras", "keras_hub", "torch"}, (
            module.__name__,
            imported,
        )


# --- real STS-B files -------------------------------------------------------


def _normalize(text):
    """Lowercase and drop spaces, so tokenized and raw text compare equal."""
    return "".join(text.lower().split())


def test_real_stsb_test_files():
    processed = SHARED_STS / "STSBenchmark" / "sts-test.csv"
    if not processed.is_file():
        processed = PACKAGED_STS / "STSBenchmark" / "sts-test.csv"
    assert processed.is_file(), f"the packaged {processed} is missing"
    pairs = read_stsb(processed)
    assert len(pairs) == 1379
    s1, s2, score = pairs[0]
    assert score == 2.5
    assert _normalize(s1) == _normalize("a girl is styling her hair .")
    assert _normalize(s2) == _normalize("a girl is brushing her hair .")
    if processed.parent.name == "STSBenchmark":
        assert (s1, s2) == (
            "a girl is styling her hair .",
            "a girl is brushing her hair .",
        )
    assert all(0.0 <= p[2] <= 5.0 for p in pairs)
    assert load_sts_pairs(processed.parent, "stsb", "test") == pairs

    original = SHARED_STS / "STSBenchmark-original" / "sts-test.csv"
    if original.is_file():  # not shipped in the package; shared/ only
        original_pairs = read_stsb(original)
        assert len(original_pairs) == 1379
        assert original_pairs[0] == (
            "A girl is styling her hair.",
            "A girl is brushing her hair.",
            2.5,
        )
        assert [p[2] for p in original_pairs] == [p[2] for p in pairs]
        assert all(p[0] and p[1] for p in original_pairs)
    else:
        assert processed.parent == PACKAGED_STS / "STSBenchmark"


def test_real_stsb_end_to_end():
    folder = SHARED_STS if SHARED_STS.is_dir() else PACKAGED_STS
    encoder = FakeEncoder()
    result = evaluate_sts(encoder, folder, tasks="stsb")
    test = result["STSBenchmark"]["test"]
    assert test["n"] == 1379
    assert -100 <= test["spearman"] <= 100
    assert len(encoder.seen) == len(set(encoder.seen))


# --- the 7-task report and STS 2017 ----------------------------------------

STS17_TRACKS = {  # SemEval-2017 file names: STS.input.track<k>.<langs>.txt
    "track1.ar-ar": [("قطة تجلس .", "قطة تجلس على الحصيرة .", 4.2),
                     ("رجل يقرأ .", "السماء زرقاء .", 0.4), ("ولد يركض .", "ولد يجري بسرعة .", 3.9)],
    "track4a.es-en": [("un perro ladra .", "a dog barks .", 5.0),
                      ("la casa es roja .", "stocks fell today .", 0.2), ("el niño come .", "a boy eats .", 4.6)],
    "track4b.es-en": [("el tren llega .", "the train arrives late .", 3.8),
                      ("hace frío .", "a man sings .", 0.6), ("ella baila .", "she dances .", 4.9)],
    "track5.en-en": [("a man plays the guitar .", "a man is playing a guitar .", 5.0),
                     ("a cat eats fish .", "markets rallied on friday .", 0.5),
                     ("kids swim in a pool .", "children are swimming .", 4.1)],
}


def seven_task_folder(root):
    """All seven tasks of the papers' STS table, each with a couple of subsets, plus STS17."""
    write_stsb(root / "STS" / "STSBenchmark", {"test": STSB_TEST, "dev": STSB_DEV})
    write_sick(root / "SICK")
    for year, subsets in {
        "STS12": {"MSRpar": STS12_A, "MSRvid": STS12_B},
        "STS13": {"FNWN": STS12_B[:4], "headlines": STSB_TEST},
        "STS14": {"images": STS12_B, "tweet-news": STSB_DEV + STS12_A[:2]},
        "STS15": {"answers-forums": STSB_TEST[:4], "belief": STS12_B},
        "STS16": {"postediting": STS12_B[1:], "question-question": STSB_TEST},
    }.items():
        prefix = "STS2016" if year == "STS16" else "STS"
        write_sts_year(root / "STS" / f"{year}-en-test", subsets, prefix=prefix)
    write_sts_year(root / "STS" / "STS17", STS17_TRACKS)
    return root


def test_seven_task_report_and_sts17(tmp_path):
    root = seven_task_folder(tmp_path / "downstream")
    result = evaluate_sts(FakeEncoder(), root)
    assert list(result["avg"]["tasks"]) == list(sts.STS_TASKS)  # STS17 is not in the avg
    # STS17: subsets named by language pair, the second es-en keeps its track.
    assert list(result["STS17"]["subsets"]) == ["ar-ar", "es-en", "es-en (track4b)", "en-en"]
    assert_corr(result["STS17"]["subsets"]["en-en"], STS17_TRACKS["track5.en-en"])
    assert result["protocol"]["data"]["STS17"]["path"].endswith("STS17")
    # The 7-task averages, recomputed from the per-task numbers.
    for agg in sts.AGGREGATIONS:
        mains = [result[t][agg]["spearman"] for t in sts.STS_YEAR_TASKS]
        mains += [result["STSBenchmark"]["test"]["spearman"], result["SICKRelatedness"]["test"]["spearman"]]
        assert result["avg_by_aggregation"][agg]["spearman"] == pytest.approx(np.mean(mains), abs=1e-9)
    assert result["avg"] == result["avg_by_aggregation"]["all"]
    # STS12 "all" is one correlation over the concatenated subsets.
    assert_corr(result["STS12"]["all"], scored(STS12_A) + STS12_B)
    # Only STS17, from its own folder.
    only = evaluate_sts(FakeEncoder(), root / "STS" / "STS17")
    assert set(only) == {"protocol", "STS17"}
    assert sts.load_sts_pairs(root, "sts17")["ar-ar"] == STS17_TRACKS["track1.ar-ar"]

"""The `keras-sentemb` command line: its documented contract (docs/cli.md).

Commands run in-process through `keras_sentemb.cli.main` on a tiny saved
model; one test runs the console entry point as a subprocess.
"""

import inspect
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from keras_sentemb import cli
from keras_sentemb.kernels import cpu_threads
from keras_sentemb.data.resources import bundled_sts_dir
from keras_sentemb.models import SentenceEncoder
from tests.conftest import REPO
from tests.conftest import make_tiny_encoder
from tests.helpers.corpora import CORPUS
from tests.numeric import assert_close_vectors
from tests.numeric import default_precision_bounds


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli") / "tiny"
    make_tiny_encoder().save(folder)
    return str(folder)


def test_encode_writes_one_row_per_line_empty_lines_included(tiny_model, tmp_path, capsys):
    lines = ["a man plays the guitar", "", "the cat sits on the mat", "hello"]
    (tmp_path / "in.txt").write_bytes(("\r\n".join(lines) + "\n").encode("utf-8"))
    out = tmp_path / "out.npy"
    assert cli.main(["encode", "--model", tiny_model, "--input", str(tmp_path / "in.txt"),
                     "--output", str(out), "--pooling", "max", "--normalize"]) == 0
    vectors = np.load(out)
    assert vectors.shape == (4, 32) and vectors.dtype == np.float32
    expected = SentenceEncoder.from_preset(tiny_model).encode(lines, pooling="max", normalize=True)
    assert_close_vectors(vectors, expected, **default_precision_bounds())
    captured = capsys.readouterr()
    assert captured.out == "" and "4 x 32 float32" in captured.err


def test_encode_replaces_invalid_utf8_with_a_warning(tiny_model, tmp_path, capsys):
    (tmp_path / "bad.txt").write_bytes(b"caf\xe9 ok\nfine\n")
    out = tmp_path / "bad.npy"
    assert cli.main(["encode", "--model", tiny_model, "--input", str(tmp_path / "bad.txt"),
                     "--output", str(out)]) == 0
    assert np.load(out).shape == (2, 32)
    assert "not valid UTF-8 (line 1)" in capsys.readouterr().err


def test_evaluate_sts_prints_one_json_line(tiny_model, capsys):
    assert cli.main(["evaluate", "sts", "--model", tiny_model, "--data", str(bundled_sts_dir()),
                     "--split", "dev"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1
    result = json.loads(out[0])
    assert result["model"] == tiny_model
    assert -100 <= result["STSBenchmark"]["dev"]["spearman"] <= 100


@pytest.mark.parametrize(
    "argv, message",
    [
        (["encode", "--model", "no_such_model", "--input", "x.txt", "--output", "y.npy"],
         "input file not found"),
        (["evaluate", "sts", "--model", "no_such_model_anywhere", "--data", "."],
         "Unknown model 'no_such_model_anywhere'"),
        (["train", "ct", "--train-file", "missing.txt", "--output", "o"], "train file not found"),
    ],
)
def test_user_mistakes_are_one_line_and_exit_2(argv, message, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("keras-sentemb: error:") and message in err[0]


def test_bad_pooling_is_an_argparse_error(tiny_model, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["encode", "--model", tiny_model, "--input", "x", "--output", "y",
                  "--pooling", "middle"])
    assert exit_info.value.code == 2
    assert "Unknown pooling 'middle'" in capsys.readouterr().err


def test_method_flags_mirror_every_fit_argument():
    """Each fit_* keyword argument outside the fixed flags is a --kebab-case flag."""
    from keras_sentemb.methods import get_method
    from keras_sentemb.methods import list_methods

    for name in list_methods():
        parser, method = cli.method_option_parser(name)
        flags = {a.dest for a in parser._actions}
        python_only = {f.name for f in method.config_class.option_fields() if f.python_only}
        python_only |= {"strategy", "callbacks"}
        params = [p for p in method.signature().parameters
                  if p not in cli.FIXED_RUN_ARGUMENTS and p != "data" and p not in python_only]
        assert set(params) <= flags, (name, set(params) - flags)
        assert not python_only & flags
        assert list(method.signature().parameters)[:14] == [
            "data", "model", "steps", "batch_size", "learning_rate", "max_length", "pooling",
            "dev", "eval_every", "output", "strategy", "callbacks", "seed", "verbose",
        ], name
        assert get_method(name) is method


def test_string_options_stay_strings():
    parser, _ = cli.method_option_parser("simcse")
    options = parser.parse_args(["--mlp", "none", "--pooling", "mean", "--dev", "none",
                                 "--eval-every", "10"])
    assert options.mlp == "none" and options.pooling == "mean" and options.dev == "none"
    assert options.eval_every == 10


def test_max_grad_norm_takes_a_number_or_none():
    parser, _ = cli.method_option_parser("simcse")
    assert parser.parse_args(["--max-grad-norm", "none"]).max_grad_norm is None
    assert parser.parse_args(["--max-grad-norm", "0.5"]).max_grad_norm == 0.5
    with pytest.raises(SystemExit):
        parser.parse_args(["--max-grad-norm", "lots"])


def test_train_simcse_mlp_none_from_the_command_line(tiny_model, tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(CORPUS[:64]), encoding="utf-8")
    out = tmp_path / "simcse"
    assert cli.main(["train", "simcse", "--model", tiny_model, "--train-file", str(corpus),
                     "--output", str(out), "--steps", "2", "--batch-size", "8",
                     "--mlp", "none", "--pooling", "cls", "--dev", "none",
                     "--verbose", "0"]) == 0
    report = json.loads((out / "training_report.json").read_text())
    assert report["resolved"]["mlp"] == "none" and report["pooling"] == "cls"
    assert "pooling cls: set by the caller" in capsys.readouterr().err
    assert SentenceEncoder.from_preset(str(out)).declared_pooling == "cls"


def test_console_script_runs(tiny_model, tmp_path):
    (tmp_path / "in.txt").write_text("hello world\n", encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "keras_sentemb", "encode", "--model", tiny_model,
         "--input", str(tmp_path / "in.txt"), "--output", str(tmp_path / "o.npy")],
        capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout == "" and np.load(tmp_path / "o.npy").shape == (1, 32)


def test_num_layers_on_every_model_command(tiny_model, tmp_path):
    (tmp_path / "in.txt").write_text("hello world\n", encoding="utf-8")
    assert cli.main(["encode", "--model", tiny_model, "--num-layers", "1", "--input",
                     str(tmp_path / "in.txt"), "--output", str(tmp_path / "o.npy")]) == 0
    expected = SentenceEncoder.from_preset(tiny_model, num_layers=1).encode(["hello world"])
    assert_close_vectors(np.load(tmp_path / "o.npy"), expected, **default_precision_bounds())
    parser = cli.build_parser()
    for argv in (["evaluate", "sts", "--model", "m", "--data", "d", "--num-layers", "2"],
                 ["export", "--model", "m", "--output", "o", "--num-layers", "2"],
                 ["analyze", "alignment-uniformity", "--model", "m", "--output", "o", "--num-layers", "2"],
                 ["train", "ct", "--train-file", "f", "--output", "o", "--num-layers", "2"]):
        assert parser.parse_known_args(argv)[0].num_layers == 2


def test_evaluate_transfer_and_all_from_the_command_line(tiny_model, tmp_path, capsys):
    from tests.helpers.corpora import STSB_TEST
    from tests.helpers.files import write_downstream, write_stsb

    root = write_downstream(tmp_path / "downstream", n=24)
    write_stsb(root / "STS" / "STSBenchmark", {"test": STSB_TEST})
    assert cli.main(["evaluate", "transfer", "--model", tiny_model, "--data", str(root),
                     "--tasks", "SST2,TREC", "--seed", "5", "--config", "fast"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1  # one JSON line, nothing else on stdout
    result = json.loads(out[0])
    assert set(result) == {"protocol", "SST2", "TREC", "avg", "model"}
    assert result["protocol"]["seed"] == 5 and result["protocol"]["pooling"] == "mean"
    assert 0 <= result["TREC"]["acc"] <= 100
    assert cli.main(["evaluate", "sts", "--model", tiny_model, "--data", str(root),
                     "--format", "markdown"]) == 0
    table = capsys.readouterr().out
    assert table.startswith("| Spearman x100 | STS-B | Avg. |")
    report = tmp_path / "report"
    assert cli.main(["evaluate", "all", "--model", tiny_model, "--data", str(root),
                     "--tasks", "stsb,MRPC", "--config", "fast", "--output", str(report)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result["transfer"]["avg"]["tasks"]) == {"MRPC"}
    assert list(result["sts"]["avg"]["tasks"]) == ["STSBenchmark"]
    assert json.loads((tmp_path / "report.json").read_text())["transfer"]["MRPC"] == result["transfer"]["MRPC"]
    markdown = (tmp_path / "report.md").read_text()
    assert "## STS" in markdown and "## SentEval transfer tasks" in markdown and "MRPC" in markdown
    # User mistakes: one line, exit 2.
    assert cli.main(["evaluate", "sts", "--model", tiny_model, "--data", str(root), "--seed", "1"]) == 2
    assert cli.main(["evaluate", "transfer", "--model", tiny_model, "--data", str(root),
                     "--tasks", "SICKE"]) == 2
    assert "Unknown transfer task" in capsys.readouterr().err


def test_bad_data_is_refused_with_a_line_naming_it(tiny_model, tmp_path, capsys):
    """An empty STS file, a batch of one for an in-batch loss, and a parallel
    corpus too small for its held-out split: each a one-line error, exit 2."""
    sts = tmp_path / "STS" / "STSBenchmark"
    sts.mkdir(parents=True)
    (sts / "sts-dev.csv").write_text("")
    assert cli.main(["evaluate", "sts", "--model", tiny_model, "--data", str(sts / "sts-dev.csv"),
                     "--split", "dev"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "sts-dev.csv: no scored sentence pairs" in err[0]

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("one sentence\nanother sentence\n")
    assert cli.main(["train", "simcse", "--model", tiny_model, "--train-file", str(corpus),
                     "--output", str(tmp_path / "out"), "--batch-size", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "`batch_size` must be >= 2 for simcse" in err[-1]
    assert not (tmp_path / "out").exists()

    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("".join(f"source {i}\ttarget {i}\n" for i in range(5)))
    assert cli.main(["train", "parallel", "--model", tiny_model, "--train-file", str(pairs),
                     "--output", str(tmp_path / "out2"), "--steps", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert str(pairs) in err and "--eval-size" in err and "5 pairs are too few" in err


@pytest.mark.parametrize("method,splits", [("ct", True), ("simcse", True), ("consert", True),
                                           ("mlm", False), ("sts", False)])
def test_train_splits_the_cores_only_for_two_pass_methods(method, splits, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(cpu_threads, "configure_train_threads",
                        lambda: calls.append(method) or True)
    assert cli.main(["train", method, "--train-file", "no-such-file.txt", "--output", "x"]) == 2
    assert "train file not found" in capsys.readouterr().err
    assert calls == ([method] if splits else [])


@pytest.mark.parametrize("verbose", [False, True])
def test_an_internal_error_is_a_bug_report_with_its_own_exit_status(verbose, monkeypatch, capsys):
    from keras_sentemb.cli import export as export_command

    def broken(args):
        raise TypeError("unsupported operand type(s) for +: 'int' and 'str'")

    monkeypatch.setattr(export_command, "run", broken)
    argv = ["export", "--model", "m", "--output", "o"] + (["--verbose"] if verbose else [])
    assert cli.main(argv) == cli.EXIT_INTERNAL_ERROR == 70
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert last.startswith("keras-sentemb: internal error: TypeError: unsupported operand")
    assert ("Traceback (most recent call last)" in err) == verbose
    assert ("--verbose for the traceback" in last) != verbose


def test_a_value_error_from_inside_tensorflow_is_an_internal_error(monkeypatch, capsys):
    # A shape TensorFlow refuses while tracing: a value the toolkit passed on
    # unchecked, not the user's mistake.
    import tensorflow as tf

    from keras_sentemb.cli import export as export_command

    def traces_a_bad_reshape(args):
        tf.function(lambda: tf.reshape(tf.zeros([3]), [2]))()

    monkeypatch.setattr(export_command, "run", traces_a_bad_reshape)
    assert cli.main(["export", "--model", "m", "--output", "o"]) == cli.EXIT_INTERNAL_ERROR
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("keras-sentemb: internal error: ValueError")


def test_a_bad_value_stays_a_user_error(monkeypatch, capsys):
    from keras_sentemb.cli import export as export_command

    def refuses(args):
        raise ValueError("`tolerance` must be > 0. Received: tolerance=-1.")

    monkeypatch.setattr(export_command, "run", refuses)
    assert cli.main(["export", "--model", "m", "--output", "o"]) == cli.EXIT_USER_ERROR == 2
    assert capsys.readouterr().err.strip() == (
        "keras-sentemb: error: `tolerance` must be > 0. Received: tolerance=-1.")


def test_a_method_option_is_never_read_as_the_flag_it_begins():
    # `--mode` begins `--model`: argparse's prefix matching would take one for the other.
    args, extra = cli.build_parser().parse_known_args(
        ["train", "simcse", "--train-file", "t.txt", "--output", "o", "--mode", "sup"])
    assert args.model is None and extra == ["--mode", "sup"]  # not given: the method's or preset's
    options, unknown = cli.method_option_parser("simcse")[0].parse_known_args(extra)
    assert options.mode == "sup" and unknown == []
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["encode", "--mod", "default", "--input", "a", "--output", "b"])


def test_verbose_encode_reports_the_models_kernels(tmp_path, capsys):
    folder = tmp_path / "plain_dropout"
    make_tiny_encoder(kernels={"dropout": "plain"}).save(folder)
    (tmp_path / "in.txt").write_text("hello\n", encoding="utf-8")
    assert cli.main(["encode", "--model", str(folder), "--input", str(tmp_path / "in.txt"),
                     "--output", str(tmp_path / "out.npy"), "--verbose"]) == 0
    err = capsys.readouterr().err
    assert "kernels on this CPU (" in err
    assert any(line.split()[:3] == ["dropout", "plain", "policy"] for line in err.splitlines())
    assert any(line.split()[:1] == ["layer_norm"] for line in err.splitlines())


@pytest.mark.parametrize("argv, quick", [
    (["encode", "--model", "m", "--input", "i", "--output", "o"], True),
    (["--verbose", "encode", "--model", "m", "--input", "i", "--output", "o"], True),
    (["export", "--model", "m", "--output", "o"], False),
    (["train", "ct", "--train-file", "t", "--output", "o"], False),
])
def test_only_encode_skips_pythons_teardown(argv, quick, monkeypatch):
    from keras_sentemb.cli import program

    quick_exits = []
    monkeypatch.setattr(program, "main", lambda argv: 3)
    monkeypatch.setattr(program, "exit_quickly", lambda code: quick_exits.append(code))
    monkeypatch.setattr(sys, "argv", ["keras-sentemb", *argv])
    with pytest.raises(SystemExit) as exited:  # the stand-in `exit_quickly` returns
        program.run()
    assert exited.value.code == 3
    assert quick_exits == ([3] if quick else [])


QUICK_EXIT = """
import atexit, sys, threading, time
from keras_sentemb.cli.program import exit_quickly
atexit.register(lambda: print("atexit ran", file=sys.stderr))
if sys.argv[1] == "thread":
    def late():
        time.sleep(0.3)
        print("thread finished", end="")
    threading.Thread(target=late).start()
print("buffered output", end="")
exit_quickly(5)
"""


@pytest.mark.parametrize("case", ["alone", "thread"])
def test_a_quick_exit_keeps_output_status_and_atexit_handlers(case):
    # Without a running thread the process ends without Python's teardown; with
    # one it waits for it, as Python's own exit would.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run([sys.executable, "-c", QUICK_EXIT, case], capture_output=True,
                            text=True, timeout=120, env=env)
    assert result.returncode == 5
    assert result.stdout == "buffered output" + ("thread finished" if case == "thread" else "")
    assert result.stderr == "atexit ran\n"

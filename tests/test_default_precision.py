"""What users run: every precision-dependent command in its default precision, on both CPU kinds.

`encode()` and the command line default to `precision="auto"`: bfloat16 on a
CPU that computes it natively (AVX512-BF16, AMX, Arm BF16), float32 elsewhere.
The suite sets no process-wide precision, so these tests run the commands as
a user gets them: each once as on a CPU with native bfloat16 (this CPU where
it has it, its flags faked elsewhere) and once as on one without (flags
faked). Exports compare their artifact with `encode()` in the precision the
artifact computes in, so each succeeds on both; evaluation encodes in
float32, so its scores do not depend on the CPU.
"""

import contextlib
import json
import os
import re
import shlex

import numpy as np
import pytest

from keras_sentemb import cli
from keras_sentemb.kernels import cpu_threads
from keras_sentemb.kernels import native_bfloat16
from keras_sentemb.kernels import precision as precisions
from keras_sentemb.kernels.native_bfloat16 import NATIVE_BFLOAT16_FLAGS
from keras_sentemb.kernels.precision import auto_precision
from keras_sentemb.models import SentenceEncoder
from tests.conftest import REPO
from tests.conftest import make_tiny_encoder
from tests.helpers.corpora import CORPUS
from tests.helpers.litert_runtimes import run_runtime
from tests.helpers.litert_runtimes import runtimes_installed
from tests.numeric import cosines

# Each CPU kind and what "auto" computes on it.
CPU_KINDS = {"native bfloat16": "bfloat16", "no native bfloat16": "float32"}
AVX2 = frozenset({"avx", "avx2", "fma"})
LENGTH = 16


@contextlib.contextmanager
def cpu_kind(kind):
    """Run the body as on a CPU of `kind` (this CPU when it is of that kind)."""
    real = native_bfloat16.cpu_flags()
    native = bool(real and NATIVE_BFLOAT16_FLAGS & real)
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(precisions.PIN_ENV, raising=False)
        patch.delenv("KERAS_SENTEMB_BFLOAT16", raising=False)
        patch.setattr(cpu_threads, "has_accelerator", lambda: False)
        if kind == "native bfloat16" and not native:
            patch.setattr(native_bfloat16, "cpu_flags",
                          lambda path=None: AVX2 | {"avx512f", "avx512_bf16"})
        elif kind == "no native bfloat16" and native:
            patch.setattr(native_bfloat16, "cpu_flags", lambda path=None: AVX2)
        assert auto_precision()[0] == CPU_KINDS[kind]
        yield CPU_KINDS[kind]


@pytest.fixture(params=sorted(CPU_KINDS))
def cpu(request):
    with cpu_kind(request.param) as computes:
        yield computes


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A tiny encoder's folder, as `train` writes one (with Hugging Face's text cleaning, so
    that it exports to Hugging Face folders)."""
    folder = tmp_path_factory.mktemp("default_precision") / "tiny"
    make_tiny_encoder(pooling="mean", normalize=True,
                      text_normalization="bert_uncased").save(folder)
    return str(folder)


@pytest.fixture(scope="module")
def lines(tmp_path_factory):
    path = tmp_path_factory.mktemp("lines") / "sentences.txt"
    path.write_text("\n".join(CORPUS[:24]) + "\n", encoding="utf-8")
    return path


def run(*argv):
    """`keras-sentemb ARGV` in this process; asserts it exits 0."""
    assert cli.main([str(a) for a in argv]) == 0, argv


# ------------------------------------------------------------------ the suite itself
def test_the_suite_sets_no_process_wide_precision():
    """A pin would make every test compute float32 whatever the CPU, hiding the default path."""
    assert precisions.PIN_ENV not in os.environ, (
        f"{precisions.PIN_ENV} is set for the whole test process; tests that need float32 "
        "ask for it themselves (precision='float32' or monkeypatch.setenv in that test).")
    real = native_bfloat16.cpu_flags()
    if real is not None:
        assert auto_precision()[0] == ("bfloat16" if NATIVE_BFLOAT16_FLAGS & real
                                       else "float32")


# ------------------------------------------------------------------ encode
def test_encode_computes_in_the_cpus_default(cpu, model, lines, tmp_path):
    run("encode", "--model", model, "--input", lines, "--output", tmp_path / "v.npy")
    got = np.load(tmp_path / "v.npy")
    encoder = SentenceEncoder.from_preset(model)
    texts = lines.read_text(encoding="utf-8").splitlines()
    same = encoder.encode(texts, precision=cpu)
    float32 = encoder.encode(texts, precision="float32")
    # The command line loads the folder in bfloat16 directly, Python through a twin: two
    # bfloat16 graphs, equal to bfloat16's rounding.
    assert cosines(got, same).min() >= (0.99999 if cpu == "float32" else 0.9999)
    if cpu == "bfloat16":  # bfloat16 really ran: close to float32, not equal to it
        assert not np.array_equal(got, float32) and cosines(got, float32).min() >= 0.99
    else:
        assert cosines(got, float32).min() >= 0.99999


def test_sharded_encoding_never_mixes_precisions(model, lines, tmp_path, capsys):
    """A streamed encode records the precision `"auto"` chose; resuming it where `"auto"`
    chooses another is refused in one line, never a folder of mixed rows."""
    out = tmp_path / "shards"
    with cpu_kind("native bfloat16"):
        run("encode", "--model", model, "--input", lines, "--output", f"{out}/",
            "--shard-size", "10")
    assert json.loads((out / "manifest.json").read_text())["precision"] == "bfloat16"
    with cpu_kind("no native bfloat16"):
        capsys.readouterr()
        assert cli.main(["encode", "--model", model, "--input", str(lines), "--output",
                         f"{out}/", "--shard-size", "10"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "precision" in err[0] and "Traceback" not in err[0]


# ------------------------------------------------------------------ every export
@pytest.mark.parametrize("argv", [
    ["--format", "saved-model"],
    ["--format", "sentence-transformers"],
    ["--format", "transformers"],
    ["--format", "litert", "--max-length", str(LENGTH)],
    ["--format", "litert", "--max-length", str(LENGTH), "--quantize", "float16"],
    ["--format", "litert", "--max-length", str(LENGTH), "--truncate-dim", "16"],
    ["--precision", "bfloat16"],
], ids=lambda argv: " ".join(argv))
def test_every_export_passes_its_gate_by_default(cpu, model, tmp_path, argv):
    """Each gate compares the artifact with encode() in what the artifact computes in."""
    output = tmp_path / ("m.tflite" if "litert" in argv else "out")
    run("export", "--model", model, "--output", output, *argv)
    assert output.exists()
    if "litert" in argv:
        from keras_sentemb.export import litert_check

        encoder = SentenceEncoder.from_preset(model)
        texts = CORPUS[:6]
        ids, mask = litert_check.pack_ids(encoder, texts, LENGTH)
        got = litert_check.run_litert(output.read_bytes(), ids, mask)
        dim = 16 if "--truncate-dim" in argv else None
        float32 = encoder.encode(texts, max_length=LENGTH, truncate_dim=dim, precision="float32")
        assert cosines(got, float32).min() >= (0.9999 if "float16" not in argv else 0.999)


# ------------------------------------------------------------------ evaluate
def test_evaluation_scores_do_not_depend_on_the_cpu(model, tmp_path, capsys):
    from keras_sentemb.data.resources import bundled_sts_dir

    scores = {}
    for kind in CPU_KINDS:
        with cpu_kind(kind):
            capsys.readouterr()
            run("evaluate", "sts", "--model", model, "--data", bundled_sts_dir(),
                "--tasks", "STSBenchmark", "--split", "dev")
            scores[kind] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    first, second = scores.values()
    assert first == second


# ------------------------------------------------------------------ static models
@pytest.fixture(scope="module")
def static_model(model, tmp_path_factory):
    folder = tmp_path_factory.mktemp("static")
    corpus = folder / "corpus.txt"
    corpus.write_text("\n".join(CORPUS[:96]) + "\n", encoding="utf-8")
    run("train", "static", "--model", model, "--train-file", corpus, "--output",
        folder / "static", "--steps", "2", "--batch-size", "8", "--dims", "8", "--verbose", "0")
    return folder / "static"


@pytest.mark.parametrize("argv", [
    ["--format", "sentence-transformers"],
    ["--format", "model2vec"],
    ["--format", "saved-model"],
    ["--format", "litert", "--max-length", str(LENGTH)],
], ids=lambda argv: " ".join(argv))
def test_static_models_encode_and_export_by_default(cpu, static_model, lines, tmp_path, argv):
    run("encode", "--model", static_model, "--input", lines, "--output", tmp_path / "v.npy")
    assert np.load(tmp_path / "v.npy").shape == (24, 8)
    output = tmp_path / ("m.tflite" if "litert" in argv else "out")
    run("export", "--model", static_model, "--output", output, *argv)
    assert output.exists()


# ------------------------------------------------------------------ train
def test_training_runs_and_saves_by_default(cpu, model, lines, tmp_path):
    run("train", "ct", "--model", model, "--train-file", lines, "--output", tmp_path / "ct",
        "--steps", "2", "--batch-size", "8", "--verbose", "0")
    trained = SentenceEncoder.from_preset(str(tmp_path / "ct"))
    vectors = trained.encode(CORPUS[:4], precision="float32")
    assert vectors.shape == (4, 32) and np.isfinite(vectors).all()


# ------------------------------------------------------------------ the README
def _readme_commands():
    """The command lines of the README's Quick start, as written."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    start = text.index("## Quick start")
    section = text[start:text.index("\n## ", start + 1)]
    return [line for line in section.splitlines() if line.startswith("keras-sentemb ")]


@pytest.mark.integration
def test_the_readmes_commands_run_in_the_default_precision(tmp_path, monkeypatch, capsys):
    """The Quick start's commands with the bundled model, as written (CT shortened to 2 steps,
    the sentences file a few lines), in this CPU's default precision."""
    from keras_sentemb.data.resources import bundled_sts_dir

    commands = _readme_commands()
    assert [c.split()[1] for c in commands] == ["encode", "evaluate", "train", "export"]
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(precisions.PIN_ENV, raising=False)
    (tmp_path / "sentences.txt").write_text("\n".join(CORPUS[:32]) + "\n", encoding="utf-8")
    os.makedirs("keras_sentemb/resources", exist_ok=True)
    os.symlink(bundled_sts_dir(), "keras_sentemb/resources/STS")
    for command in commands:
        argv = shlex.split(re.sub(r"--steps \d+", "--steps 2", command))[1:]
        capsys.readouterr()
        assert cli.main(argv) == 0, command
    assert np.load("vectors.npy").shape == (32, 384)
    assert os.path.isdir("saved_models/ct/1")


@pytest.mark.integration
def test_the_default_models_litert_file_embeds_like_encode_through_mediapipe(
        default_encoder, tmp_path):
    """`export --model default --format litert --max-length 32` in the default precision: the
    file passes its gate, and MediaPipe's TextEmbedder (tokenizing by itself) gives encode()'s
    float32 vectors (cosine >= 0.9999)."""
    with cpu_kind("native bfloat16"):
        run("export", "--model", "default", "--format", "litert", "--output",
            tmp_path / "m.tflite", "--max-length", "32")
    if not runtimes_installed():
        pytest.skip("the LiteRT test extra (ai-edge-litert, mediapipe) is not installed")
    texts = ["A man is playing a guitar.", "A woman is slicing an onion.",
             "What time does the train to Boston leave?", "hello world"]
    _, got = run_runtime("mediapipe", tmp_path / "m.tflite", texts, tmp_path)
    reference = default_encoder.encode(texts, max_length=32, precision="float32")
    assert cosines(got, reference).min() >= 0.9999


# ------------------------------------------------------------------ every gate names its precision
# Calls of `.encode(...)` in the export gates, evaluation and the Beam pipeline that need not
# name a precision, with the reason.
_NO_PRECISION = {
    ("export/static_formats.py", "read_back(folder, format, encoder.normalize).encode(probes)"):
        "a static table read back from the folder: numpy, float32 only",
    ("evaluation/mteb_runner.py", "self.client.encode(texts, prompt)"):
        "MTEB's side of the pipe to the encoder's process, which was started with its precision",
}


def test_every_comparison_with_encode_names_its_precision():
    """An export's gate, an evaluation or a Beam worker that called `encode()` without a
    precision would compute in the CPU's default: bfloat16 against a float32 artifact on one
    CPU, float32 on another. Each call names the precision (or goes through `reproducible` /
    `reference_vectors`, which do)."""
    import ast

    package = REPO / "keras_sentemb"
    unnamed = []
    for folder in ("export", "evaluation", "beam"):
        for path in sorted((package / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr == "encode" and (node.args or node.keywords)):
                    continue
                if node.args and isinstance(node.args[0], ast.Constant):
                    continue  # str.encode("utf-8")
                named = any(k.arg == "precision" for k in node.keywords) or any(
                    k.arg is None and isinstance(k.value, ast.Call)
                    and getattr(k.value.func, "id", "") == "reproducible" for k in node.keywords)
                where = (path.relative_to(package).as_posix(), ast.unparse(node))
                if not named and where not in _NO_PRECISION:
                    unnamed.append(f"{where[0]}:{node.lineno}: {where[1]}")
    assert not unnamed, "encode() without a precision:\n" + "\n".join(unnamed)

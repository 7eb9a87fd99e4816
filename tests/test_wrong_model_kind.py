"""A model of the wrong kind is one line for every pairing of model kind and command.

The kinds: a static model (a folder written by `StaticEncoder.save`), an
exported SavedModel (`NAME/VERSION/saved_model.pb`), a LiteRT file and a
`.keras` archive, against every training method of the registry (as
`--model`), the parallel method's teacher and student, `encode`, `evaluate`
and each `export` format; and a Transformer against the static exports. Each
is refused in one line on stderr with exit status 2 (a `ValueError` /
`TypeError` in Python), before any data is read or anything is written.
"""

import pytest

from keras_sentemb import cli
from keras_sentemb import list_methods

NOT_TRANSFORMERS = ("static", "saved_model", "litert", "keras_archive")
EXPECTED = {
    "static": "is a static model (a table of token vectors, no Transformer)",
    "saved_model": "is an exported SavedModel (for serving; it does not load back as a model)",
    "litert": "is a LiteRT file (for serving; it does not load back as a model)",
    "keras_archive": "is a .keras archive (load it with keras.saving.load_model)",
}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """One model of each kind (the serving ones are their marker files: only those are read)."""
    from tests.static_fixtures import tiny_static

    root = tmp_path_factory.mktemp("kinds")
    static, teacher = tiny_static()
    static.save(root / "static")
    teacher.save(root / "transformer")
    (root / "saved_model" / "1").mkdir(parents=True)
    (root / "saved_model" / "1" / "saved_model.pb").write_bytes(b"\x08\x01")
    (root / "model.tflite").write_bytes(b"TFL3" + bytes(60))
    (root / "model.keras").write_bytes(b"PK\x05\x06" + bytes(18))
    paths = {"static": root / "static", "transformer": root / "transformer",
             "saved_model": root / "saved_model", "litert": root / "model.tflite",
             "keras_archive": root / "model.keras"}
    (root / "train.txt").write_text("a man is playing a guitar .\nthe dog runs\n" * 20)
    (root / "pairs.tsv").write_text("a man is playing\tthe man plays\n" * 40)
    return root, {k: str(v) for k, v in paths.items()}


def _run(argv, capsys):
    code = cli.main(argv)
    captured = capsys.readouterr()
    return code, captured.err.strip().splitlines()


def _one_line(code, err, expected):
    assert code == 2, err
    assert len(err) == 1 and err[0].startswith("keras-sentemb: error: "), err
    assert expected in err[0], err[0]
    assert "internal error" not in err[0]


@pytest.mark.parametrize("kind", NOT_TRANSFORMERS)
@pytest.mark.parametrize("method", list_methods())
def test_train_refuses_a_model_that_is_no_transformer(method, kind, models, capsys):
    root, paths = models
    output = root / f"out-{method}-{kind}"
    train_file = root / ("pairs.tsv" if method == "parallel" else "train.txt")
    code, err = _run(["train", method, "--model", paths[kind], "--train-file", str(train_file),
                      "--output", str(output), "--steps", "1", "--batch-size", "2"], capsys)
    _one_line(code, err, f"`model` {paths[kind]} {EXPECTED[kind]}")
    assert "every training method starts from a Transformer" in err[0]
    assert not output.exists() and not (root / f"out-{method}-{kind}.backup").exists()


@pytest.mark.parametrize("role", ["teacher", "student"])
@pytest.mark.parametrize("kind", NOT_TRANSFORMERS)
def test_parallel_teacher_and_student_must_be_transformers(role, kind, models, capsys):
    root, paths = models
    output = root / f"out-parallel-{role}-{kind}"
    code, err = _run(["train", "parallel", "--model", paths["transformer"], f"--{role}",
                      paths[kind], "--train-file", str(root / "pairs.tsv"), "--output",
                      str(output), "--steps", "1"], capsys)
    _one_line(code, err, f"`{role}` {paths[kind]} {EXPECTED[kind]}; the {role} is a "
                         "Transformer encoder")
    assert not output.exists()


@pytest.mark.parametrize("kind", ["saved_model", "litert", "keras_archive"])
@pytest.mark.parametrize("command", ["encode", "evaluate", "export-saved-model",
                                     "export-sentence-transformers", "export-litert"])
def test_serving_files_load_nowhere(command, kind, models, capsys):
    root, paths = models
    out = root / f"o-{command}-{kind}"
    argv = {"encode": ["encode", "--model", paths[kind], "--input", str(root / "train.txt"),
                       "--output", f"{out}.npy"],
            "evaluate": ["evaluate", "sts", "--model", paths[kind], "--data", str(root)]}.get(
        command) or ["export", "--model", paths[kind], "--format", command[len("export-"):],
                     "--output", str(out) + (".tflite" if command.endswith("litert") else "")]
    code, err = _run(argv, capsys)
    _one_line(code, err, f"`model` {paths[kind]} {EXPECTED[kind]}; a model is 'default'")
    assert not any(p.name.startswith(out.name) for p in root.iterdir())


@pytest.mark.parametrize("argv, expected", [
    (["export", "--format", "transformers"], "--format transformers exports a Transformer"),
    (["encode", "--num-layers", "1"], "--num-layers is not supported|--num-layers applies"),
    (["evaluate", "sts", "--num-layers", "1"], "--num-layers applies to Transformer models"),
    (["evaluate", "sts", "--pooling", "cls"], "a static model, which averages its token vectors"),
    (["export", "--format", "saved-model", "--precision", "int8"],
     "--precision applies to Transformer models"),
], ids=["export-transformers", "encode-num-layers", "evaluate-num-layers", "evaluate-pooling",
        "export-precision"])
def test_static_model_with_a_transformer_only_option(argv, expected, models, capsys):
    import re

    root, paths = models
    argv = argv[:1] + (argv[1:2] if argv[0] == "evaluate" else []) + [
        "--model", paths["static"]] + argv[(2 if argv[0] == "evaluate" else 1):]
    if argv[0] == "encode":
        argv += ["--input", str(root / "train.txt"), "--output", str(root / "s.npy")]
    elif argv[0] == "evaluate":
        argv += ["--data", str(root)]
    else:
        argv += ["--output", str(root / "s-export")]
    code, err = _run(argv, capsys)
    assert code == 2 and len(err) == 1, err
    assert re.search(expected, err[0]), err[0]
    assert not (root / "s.npy").exists() and not (root / "s-export").exists()


def test_transformer_to_a_static_only_format(models, capsys):
    root, paths = models
    code, err = _run(["export", "--model", paths["transformer"], "--format", "model2vec",
                      "--output", str(root / "m2v")], capsys)
    _one_line(code, err, "--format model2vec exports a static model")


def test_python_refuses_the_wrong_kind(models):
    import keras_sentemb
    from keras_sentemb.models import SentenceEncoder
    from keras_sentemb.models.static_encoder import StaticEncoder

    root, paths = models
    static = StaticEncoder.from_preset(paths["static"])
    for method in list_methods():
        with pytest.raises(ValueError, match=r"`model` a StaticEncoder is a static model"):
            keras_sentemb.fit(method, ["a b"] * 4, model=static, steps=1)
    with pytest.raises(ValueError, match=r"`teacher` must be a string or a path or "
                                         r"SentenceEncoder or None\. Received: teacher=<Static"):
        keras_sentemb.fit("parallel", [("a", "b")] * 4, model=paths["transformer"],
                          teacher=static)
    for export, args in ((keras_sentemb.export_saved_model, ()),
                         (keras_sentemb.export_huggingface, ()),
                         (keras_sentemb.export_litert, ())):
        for given in (static, paths["static"]):
            with pytest.raises(TypeError, match=r"is a static model .*export_static"):
                export(given, str(root / "never"), *args)
    transformer = SentenceEncoder.from_preset(paths["transformer"])
    with pytest.raises(TypeError, match="must be a StaticEncoder or a static folder"):
        keras_sentemb.export_static(transformer, str(root / "never"), format="model2vec")
    assert not (root / "never").exists()

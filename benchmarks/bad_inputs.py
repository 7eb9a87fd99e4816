"""Bad inputs, tried for real: what each command gets (the table in docs/results/bad-inputs.md).

Runs the command line (a fresh process per case, as a user would) and the
Python API on the bundled default model and on broken copies of it, and
prints a markdown table: the input, the exit code, and the last line on
stderr (or the result). Nothing is hard-coded: every row is what this run
printed.

    python benchmarks/bad_inputs.py > /tmp/bad_inputs.md     # about 10 minutes on 2 cores
    python benchmarks/bad_inputs.py --streamed   # only streamed data, remote paths, LiteRT, plugins
    python benchmarks/bad_inputs.py --streamed --case "TFRecord files"   # the cases named so
    python benchmarks/bad_inputs.py --hostile    # only hostile model folders, models of the wrong kind

The cases of streamed training data, remote paths, LiteRT export and
plugins (`streamed_cases`) are also what tests/test_bad_streamed_inputs.py
runs on a tiny model, asserting each one's exit status, its one line and
that nothing was saved; the hostile model folders (`HOSTILE`) are what
tests/models/test_hostile_folders.py plants from tiny models, asserting the
refusal and that nothing ran.
"""

import dataclasses
import gzip
import json
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STS = REPO / "keras_sentemb" / "resources" / "STS"
# A file-size limit (`ulimit -f`, bytes) below the size of a LiteRT file.
LITERT_FSIZE = 40_000


def last_line(text):
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def run_cli(*args, stdin=None, fsize=None, pythonpath=None):
    """Runs `keras-sentemb ARGS` in a fresh process; returns its `CompletedProcess`.

    `fsize` runs it under a file-size limit of that many bytes (as `ulimit -f`
    does); `pythonpath` puts a folder first on its module path.
    """
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pythonpath),
                                                          env.get("PYTHONPATH")]))

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, resource.getrlimit(
            resource.RLIMIT_FSIZE)[1]))

    return subprocess.run(
        [sys.executable, "-m", "keras_sentemb", *map(str, args)],
        capture_output=True, text=True, env=env, input=stdin, timeout=900,
        preexec_fn=limit if fsize is not None else None,
    )


def cli(*args, **kwargs):
    """Runs `keras-sentemb ARGS` (see `run_cli`); returns (exit code, what it said last)."""
    done = run_cli(*args, **kwargs)
    said = last_line(done.stderr) if done.returncode else (last_line(done.stdout) or last_line(done.stderr))
    return done.returncode, said


# ------------------------------------------------- streamed training data
@dataclasses.dataclass
class Case:
    """One command-line case with bad input and what it must give.

    Attributes:
        where: str. The table's first column.
        label: str. The input, in words.
        argv: list of str. The command line after `keras-sentemb`.
        code: int. The exit status it must end with.
        names: tuple of str. What the error line (exit 2) or, with exit 0,
            one line on stderr must hold.
        output: str or None. What the command would write: absent after it
            fails, present after it succeeds.
        fsize: int or None. A file-size limit (bytes) to run it under.
        plugin: bool. Run with the broken plugin installed.
    """
    where: str
    label: str
    argv: list
    code: int = 2
    names: tuple = ()
    output: str = None
    fsize: int = None
    plugin: bool = False


WORDS = ["the man", "a woman", "the dog", "a cat", "the park", "the mat", "a guitar", "the piano"]


def sentences(n, tag=""):
    """`n` distinct short sentences of the tiny test vocabulary's words."""
    return [f"{WORDS[i % 8]} {tag}{i} plays in {WORDS[(i // 8) % 8]} ." for i in range(n)]


def _examples(path, rows, key="text"):
    import tensorflow as tf

    with tf.io.TFRecordWriter(str(path)) as writer:
        for text in rows:
            feature = tf.train.Feature(bytes_list=tf.train.BytesList(value=[text.encode()]))
            example = tf.train.Example(features=tf.train.Features(feature={key: feature}))
            writer.write(example.SerializeToString())


def _lines(path, lines, data=None):
    Path(path).write_bytes(data if data is not None else "".join(f"{x}\n" for x in lines).encode())


def write_streamed_inputs(folder):
    """The streamed training files of `streamed_cases` (under `folder`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rows = sentences(300)
    _lines(folder / "no_text.jsonl", [json.dumps({"body": t}) for t in rows[:40]])
    _examples(folder / "no_text.tfrecord", rows[:40], key="body")
    pq.write_table(pa.table({"body": rows[:40]}), str(folder / "no_text.parquet"))
    (folder / "random.tfrecord").write_bytes(random.Random(0).randbytes(20_000))
    _examples(folder / "corrupt.tfrecord", rows)
    data = bytearray((folder / "corrupt.tfrecord").read_bytes())
    data[-2000:-1990] = b"\xff" * 10  # a record near the end fails its checksum
    (folder / "corrupt.tfrecord").write_bytes(bytes(data))
    for part in range(3):  # a glob of three TFRecord files; the last one has a corrupt record
        _examples(folder / f"members-{part}.tfrecord", sentences(300 * (part + 1))[300 * part:])
    data = bytearray((folder / "members-2.tfrecord").read_bytes())
    data[-2000:-1990] = b"\xff" * 10
    (folder / "members-2.tfrecord").write_bytes(bytes(data))
    packed = gzip.compress("".join(f"{t}\n" for t in sentences(4000)).encode())
    (folder / "trunc-0.txt.gz").write_bytes(packed[: len(packed) // 2])
    _lines(folder / "mixed-0.txt", [], b"")
    _lines(folder / "mixed-1.txt", rows[:40])
    _lines(folder / "void-0.txt", [], b"")
    _lines(folder / "gone-0.txt", rows[:40])
    os.symlink(folder / "deleted.txt", folder / "gone-1.txt")  # listed, then not there
    _lines(folder / "header-0.csv", ["text,label"])
    good = [json.dumps({"text": t}) for t in rows]
    _lines(folder / "json_within.jsonl", good[:150] + ["{broken"] + good[150:])
    _lines(folder / "json_above.jsonl", [g if i % 20 else "{broken" for i, g in enumerate(good)])
    bad = [t.encode() if i % 10 else b"caf\xe9 " + t.encode() for i, t in enumerate(rows[:100])]
    _lines(folder / "bytes-0.txt", [], b"".join(b + b"\n" for b in bad))
    _lines(folder / "few-0.txt", rows[:3])
    _lines(folder / "small-0.txt", rows[:12])
    return folder


def write_broken_plugin(folder):
    """An installed distribution `broken-plugin` whose method `broken` fails to import."""
    folder = Path(folder)
    info = folder / "broken_plugin-0.1.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (folder / "broken_plugin.py").write_text(
        'raise ImportError("plugin import failed on purpose")\n', encoding="utf-8")
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 0.1\n",
                                   encoding="utf-8")
    (info / "entry_points.txt").write_text("[keras_sentemb.methods]\nbroken = broken_plugin\n",
                                           encoding="utf-8")
    return folder


def streamed_cases(work, model):
    """The cases of streamed training data, remote paths, LiteRT export and plugins.

    Args:
        work: path. A folder holding `write_streamed_inputs(work / "streamed")`.
        model: path. The model folder to train and export.

    Returns:
        list of `Case`.
    """
    data, out = Path(work) / "streamed", Path(work) / "outputs"
    quick = ["--steps", "2", "--batch-size", "4", "--max-length", "16", "--dev", "none",
             "--verbose", "0"]

    def train(label, file, names, code=2, method="simcse", extra=(), **kwargs):
        output = str(out / re.sub(r"\W+", "_", label).strip("_")[:40])
        argv = ["train", method, "--model", str(model), "--train-file", str(file),
                "--output", output, *quick, *extra]
        return Case(f"`train {method}`", label, argv, code, names, output, **kwargs)

    cases = [
        train("`.jsonl`, no `text` field in any line", data / "no_text.jsonl",
              ("no_text.jsonl", "'text'", "['body']")),
        train("`.jsonl`, no `text` field (Contrastive Tension)", data / "no_text.jsonl",
              ("no_text.jsonl", "'text'", "['body']"), method="ct",
              extra=("--negatives", "in_batch")),
        train("TFRecord, no `text` feature", data / "no_text.tfrecord",
              ("no_text.tfrecord", "'text'", "['body']")),
        train("Parquet, no `text` column", data / "no_text.parquet",
              ("no_text.parquet", "'text'", "['body']")),
        train("20 kB of random bytes named `.tfrecord`", data / "random.tfrecord",
              ("random.tfrecord", "corrupt")),
        train("TFRecord with a corrupt record near its end", data / "corrupt.tfrecord",
              ("corrupt.tfrecord", "corrupt")),
        train("a glob of three TFRecord files, the last with a corrupt record",
              data / "members-*.tfrecord", ("members-2.tfrecord", "corrupt")),
        train("a truncated `.txt.gz` (glob)", data / "trunc-*.txt.gz",
              ("trunc-0.txt.gz", "truncated")),
        train("a glob whose only file is empty", data / "void-*.txt", ("void-0.txt", "no rows")),
        train("a glob with an empty file among others", data / "mixed-*.txt", (), code=0),
        train("a listed file gone when read (dangling link)", data / "gone-*.txt",
              ("gone-1.txt", "gone (No such file")),
        train("a header-only `.csv` (glob)", data / "header-*.csv", ("header-0.csv", "no rows")),
        train("`.jsonl`, 1 broken line in 301 (under 1 %)", data / "json_within.jsonl", (),
              code=0),
        train("`.jsonl`, 15 broken lines in 300 (5 %)", data / "json_above.jsonl",
              ("json_above.jsonl", "broken records", "1 %")),
        train("`.txt` glob, 10 lines in 100 not UTF-8", data / "bytes-*.txt",
              ("bytes-0.txt", "not valid UTF-8")),
        train("3 rows, batch of 4 (glob)", data / "few-*.txt", ("few-0.txt", "fewer than one batch")),
        train("12 rows, `--steps 6` of 4 rows (glob)", data / "small-*.txt", ("times over",),
              code=0, extra=("--steps", "6")),
        train("`gs://` glob, offline", "gs://no-such-bucket/corpus-*.txt",
              ("gs://no-such-bucket/corpus-*.txt",)),
        train("`s3://` glob", "s3://no-such-bucket/corpus-*.txt",
              ("s3://no-such-bucket/corpus-*.txt", "s3://")),
        train("`hdfs://` glob", "hdfs://namenode/corpus-*.txt",
              ("hdfs://namenode/corpus-*.txt", "hdfs://")),
        train("an installed plugin whose import fails", data / "mixed-*.txt",
              ("'broken'", "broken = broken_plugin", "broken-plugin 0.1",
               "ImportError: plugin import failed on purpose"), method="broken", plugin=True),
    ]
    litert = ["export", "--model", str(model), "--format", "litert", "--tolerance", "1"]
    cases += [
        Case("`export --format litert`", f"a file-size limit of {LITERT_FSIZE // 1000} kB "
             "(a full disk)", [*litert, "--output", str(out / "limit.tflite")],
             names=("limit.tflite: file too large",),
             output=str(out / "limit.tflite"), fsize=LITERT_FSIZE),
        Case("`export --format litert`", "`--output` in a read-only folder",
             [*litert, "--output", "/sys/model.tflite"], names=("/sys/model.tflite",),
             output="/sys/model.tflite"),
    ]
    return cases


# ------------------------------------------------- hostile model folders
# A module that writes MARKER when imported, planted beside the folders: a
# hostile config names it. After a refusal it must not be in sys.modules and
# MARKER must not exist (nothing ran).
EVIL_MODULE = "sentemb_evil_marker"
MARKER = "ran.txt"
LAMBDA = {"module": "keras.layers", "class_name": "Lambda", "registered_name": None,
          "config": {"name": "x", "function": {
              "class_name": "__lambda__",
              "config": {"code": "4wEAAAAAAAAAAAAAAAEAAAADAAAA", "defaults": None,
                         "closure": None}}}}


def plant_module(folder):
    """`EVIL_MODULE.py` in `folder` (put it on the module path); returns the marker's path."""
    marker = Path(folder) / MARKER
    (Path(folder) / f"{EVIL_MODULE}.py").write_text(
        f"open({str(marker)!r}, 'w').write('imported')\nclass Evil:\n    pass\n")
    return marker


def pickle_bytes(marker):
    """A pickle whose loading creates `marker` (`open(marker, "w")`), as a hostile one runs code."""
    return b"cbuiltins\nopen\n(V" + str(marker).encode() + b"\nVw\ntR."


def write_object_npz(path, name, marker, **arrays):
    """An `.npz` whose member `name` is an object array: the pickle of `pickle_bytes`."""
    import io
    import zipfile

    import numpy as np

    member = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        member, {"descr": "|O", "fortran_order": False, "shape": (1,)})
    member.write(b"\x80\x02]q\x00" + pickle_bytes(marker)[:-1] + b"a.")
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{name}.npy", member.getvalue())
        for key, value in arrays.items():
            data = io.BytesIO()
            np.save(data, value)
            archive.writestr(f"{key}.npy", data.getvalue())


def copy_folder(src, dst):
    """A copy of the folder `src` at `dst` (links kept as links); returns `dst`."""
    shutil.copytree(src, dst, symlinks=True)
    return dst


def edit_json(path, edit):
    """Rewrite the JSON file `path` with `edit(data)` applied (in place)."""
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def _replace(path, data):
    """Write `path` anew (never through a link or into a file shared with the original)."""
    if path.exists() or path.is_symlink():
        path.unlink()
    path.write_bytes(data)


# Each plants one hostile folder in `work` from a keras_sentemb folder
# (`sentemb`), a Hugging Face / sentence-transformers folder (`hf`) and a
# static folder (`static`), and returns (folder, the file the refusal names, a
# fragment of its reason). The config names EVIL_MODULE where a module is named.
def module_outside_keras(work, sentemb, hf, static):
    folder = copy_folder(sentemb, work / "module_outside_keras")
    edit_json(folder / "config.json", lambda c: c.update(
        module=EVIL_MODULE, class_name="Evil", registered_name="evil>Evil"))
    return folder, "config.json", f"names the class 'evil>Evil' (module '{EVIL_MODULE}')"


def allowed_class_in_another_module(work, sentemb, hf, static):
    folder = copy_folder(sentemb, work / "allowed_class_in_another_module")
    edit_json(folder / "config.json", lambda c: c.update(module=EVIL_MODULE))
    return folder, "config.json", f"in module '{EVIL_MODULE}', outside the allowed set"


def class_outside_allowed_set(work, sentemb, hf, static):
    folder = copy_folder(sentemb, work / "class_outside_allowed_set")
    edit_json(folder / "tokenizer.json", lambda c: c.update(
        module="keras_sentemb.methods.simcse.trainer", class_name="SimCSETrainer",
        registered_name="keras_sentemb>SimCSETrainer"))
    return folder, "tokenizer.json", "names the class 'keras_sentemb>SimCSETrainer'"


def lambda_layer(work, sentemb, hf, static):
    import numpy as np

    folder = copy_folder(sentemb, work / "lambda_layer")
    edit_json(folder / "sentemb_config.json", lambda c: c.update(format_version=2,
                                                                  postprocess=LAMBDA))
    np.savez(folder / "sentemb_postprocess.npz", w0=np.zeros(2, "float32"))
    return folder, "sentemb_config.json", "names a Lambda layer"


def serialized_function(work, sentemb, hf, static):
    folder = copy_folder(sentemb, work / "serialized_function")
    edit_json(folder / "config.json", lambda c: c["config"].update(
        activation=LAMBDA["config"]["function"]))
    return folder, "config.json", "names a serialized function ('__lambda__'"


def pickled_weights_only(work, sentemb, hf, static):
    folder = copy_folder(hf, work / "pickled_weights_only")
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(pickle_bytes(work / MARKER))
    return folder, "pytorch_model.bin", "holds the weights only as a pickle"


def pickle_in_npz(work, sentemb, hf, static):
    import numpy as np

    folder = copy_folder(sentemb, work / "pickle_in_npz")
    edit_json(folder / "sentemb_config.json", lambda c: c.update(projection_dim=4))
    write_object_npz(folder / "sentemb_projection.npz", "kernel", work / MARKER,
                     bias=np.zeros(4, "float32"))
    return folder, "sentemb_projection.npz", "holds Python objects (kernel.npy)"


def weights_link_out(work, sentemb, hf, static):
    folder = copy_folder(sentemb, work / "weights_link_out")
    outside = work / "elsewhere.weights.h5"
    shutil.move(folder / "model.weights.h5", outside)
    os.symlink(outside, folder / "model.weights.h5")
    return folder, "model.weights.h5", "a link to"


def vocabulary_link_out(work, sentemb, hf, static):
    folder = copy_folder(hf, work / "vocabulary_link_out")
    (folder / "vocab.txt").unlink()
    os.symlink("/etc/hostname", folder / "vocab.txt")
    return folder, "vocab.txt", "a link to /etc/hostname, outside the folder"


def module_path_out(work, sentemb, hf, static):
    folder = copy_folder(hf, work / "module_path_out")
    (work / "outside").mkdir(exist_ok=True)
    _replace(folder / "modules.json", json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "../outside",
         "type": "sentence_transformers.models.Pooling"}]).encode())
    return folder, "modules.json", "names the path '../outside', outside the folder"


def weight_map_out(work, sentemb, hf, static):
    folder = copy_folder(hf, work / "weight_map_out")
    shutil.move(folder / "model.safetensors", work / "shard.safetensors")
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {"embeddings.word_embeddings.weight":
                                        "../shard.safetensors"}}))
    return folder, "model.safetensors.index.json", "names the path '../shard.safetensors'"


def custom_code(work, sentemb, hf, static):
    folder = copy_folder(hf, work / "custom_code")
    (folder / f"{EVIL_MODULE}.py").write_text(f"open({str(work / MARKER)!r}, 'w')\n")
    edit_json(folder / "config.json", lambda c: c.update(
        auto_map={"AutoModel": f"{EVIL_MODULE}.Evil"}))
    return folder, "config.json", "asks for the folder's own code (auto_map"


def custom_module_type(work, sentemb, hf, static):
    folder = copy_folder(hf, work / "custom_module_type")
    _replace(folder / "modules.json", json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": f"{EVIL_MODULE}.Evil"}]).encode())
    return folder, "modules.json", f"names the module type '{EVIL_MODULE}.Evil'"


def fifo_tokenizer(work, sentemb, hf, static):
    folder = copy_folder(hf, work / "fifo_tokenizer")
    if (folder / "tokenizer.json").exists():
        (folder / "tokenizer.json").unlink()
    os.mkfifo(folder / "tokenizer.json")
    return folder, "tokenizer.json", "neither a regular file nor a folder"


def vocabulary_of_a_billion(work, sentemb, hf, static):
    folder = copy_folder(sentemb, work / "vocabulary_of_a_billion")
    edit_json(folder / "config.json", lambda c: c["config"].update(vocabulary_size=10**9))
    return folder, "config.json", "vocabulary_size=1,000,000,000 (more than 2,000,000)"


def a_million_layers(work, sentemb, hf, static):
    folder = copy_folder(hf, work / "a_million_layers")
    edit_json(folder / "config.json", lambda c: c.update(num_hidden_layers=10**6))
    return folder, "config.json", "num_hidden_layers=1,000,000 (more than 512)"


def huge_width(work, sentemb, hf, static):
    folder = copy_folder(sentemb, work / "huge_width")
    edit_json(folder / "config.json", lambda c: c["config"].update(hidden_dim=10**7))
    return folder, "config.json", "hidden_dim=10,000,000 (more than 65,536)"


def huge_sequence_length(work, sentemb, hf, static):
    folder = copy_folder(hf, work / "huge_sequence_length")
    edit_json(folder / "config.json", lambda c: c.update(max_position_embeddings=10**8))
    return folder, "config.json", "max_position_embeddings=100,000,000"


def weights_smaller_than_config(work, sentemb, hf, static):
    folder = copy_folder(sentemb, work / "weights_smaller_than_config")
    edit_json(folder / "config.json", lambda c: c["config"].update(  # real sizes, not these weights
        num_layers=96, hidden_dim=4096, intermediate_dim=16384, num_heads=32))
    return folder, "config.json", "parameters, but its weights (model.weights.h5) hold"


def gigabyte_tokenizer(work, sentemb, hf, static):
    folder = copy_folder(hf, work / "gigabyte_tokenizer")
    if (folder / "tokenizer.json").exists():
        (folder / "tokenizer.json").unlink()
    with open(folder / "tokenizer.json", "wb") as f:
        f.truncate(2**30)  # sparse: no disk used
    return folder, "tokenizer.json", "a JSON file of 1,073,741,824 bytes"


def deeply_nested_json(work, sentemb, hf, static):
    folder = copy_folder(hf, work / "deeply_nested_json")
    if (folder / "tokenizer_config.json").exists():
        (folder / "tokenizer_config.json").unlink()
    (folder / "tokenizer_config.json").write_text("[" * 100_000 + "]" * 100_000)
    return folder, "tokenizer_config.json", "JSON nested deeper than the parser can take"


def static_table_of_a_billion_rows(work, sentemb, hf, static):
    folder = copy_folder(static, work / "static_table_of_a_billion_rows")
    header = json.dumps({"embeddings": {"dtype": "F32", "shape": [10**9, 8],
                                        "data_offsets": [0, 32]}}).encode()
    _replace(folder / "model.safetensors", len(header).to_bytes(8, "little") + header + bytes(32))
    return folder, "model.safetensors", "the tensor 'embeddings' of shape [1000000000, 8]"


def static_tokenizer_link_out(work, sentemb, hf, static):
    folder = copy_folder(static, work / "static_tokenizer_link_out")
    shutil.move(folder / "tokenizer.json", work / "tokenizer.json")
    os.symlink(work / "tokenizer.json", folder / "tokenizer.json")
    return folder, "tokenizer.json", "outside the folder"


# (the table's label, the planting function)
HOSTILE = [
    ("config names a module outside Keras", module_outside_keras),
    ("an allowed class named in another module", allowed_class_in_another_module),
    ("a class outside the allowed set (a trainer)", class_outside_allowed_set),
    ("a Lambda layer as post-processing", lambda_layer),
    ("a serialized function (`__lambda__`)", serialized_function),
    ("weights only as a pickle (`pytorch_model.bin`)", pickled_weights_only),
    ("an `.npz` of pickled objects", pickle_in_npz),
    ("weights are a link out of the folder", weights_link_out),
    ("`vocab.txt` links to /etc/hostname", vocabulary_link_out),
    ("`modules.json` path `../outside`", module_path_out),
    ("safetensors index names `../shard.safetensors`", weight_map_out),
    ("`auto_map` (the folder's own code)", custom_code),
    ("a sentence-transformers module of its own", custom_module_type),
    ("`tokenizer.json` is a FIFO", fifo_tokenizer),
    ("a vocabulary of 10^9", vocabulary_of_a_billion),
    ("10^6 layers", a_million_layers),
    ("a width of 10^7", huge_width),
    ("10^8 positions", huge_sequence_length),
    ("96 layers of 4,096 in a config, MiniLM's weights", weights_smaller_than_config),
    ("a 1 GiB `tokenizer.json`", gigabyte_tokenizer),
    ("JSON nested 100,000 deep", deeply_nested_json),
    ("static table of 10^9 rows in its header", static_table_of_a_billion_rows),
    ("static `tokenizer.json` links out", static_tokenizer_link_out),
]


def hostile_rows(work, sentemb, hf, static):
    """Table rows: `encode --model` on each `HOSTILE` folder, in a fresh process; nothing may run."""
    work = Path(work)
    marker = plant_module(work)
    rows = []
    for label, plant in HOSTILE:
        folder, name, reason = plant(work, sentemb, hf, static)
        done = run_cli("encode", "--model", folder, "--input", work / "crlf.txt", "--output",
                       work / "h.npy", pythonpath=work)
        said = last_line(done.stderr)
        if marker.exists() or (work / "h.npy").exists() or reason not in said:
            said = f"NOT REFUSED AS EXPECTED: {said}"
        rows.append(("`encode --model`", label, done.returncode, said.replace(str(work), "$TMP")))
        shutil.rmtree(folder, ignore_errors=True)
    return rows


def wrong_kind_rows(work, model, static):
    """Table rows: a model of the wrong kind for each command that cannot take it."""
    work = Path(work)
    (work / "served" / "1").mkdir(parents=True, exist_ok=True)
    (work / "served" / "1" / "saved_model.pb").write_bytes(b"\x08\x01")
    (work / "model.tflite").write_bytes(b"TFL3" + bytes(60))
    text = work / "crlf.txt"
    pairs = work / "pairs.tsv"
    pairs.write_text("a man is playing\tthe man plays\n" * 40)
    cases = [
        ("`train simcse`", "static model as `--model`",
         ["train", "simcse", "--model", static, "--train-file", text, "--output", work / "k1"]),
        ("`train static`", "static model as the teacher (`--model`)",
         ["train", "static", "--model", static, "--train-file", text, "--output", work / "k2"]),
        ("`train parallel`", "static model as `--teacher`",
         ["train", "parallel", "--model", model, "--teacher", static, "--train-file", pairs,
          "--output", work / "k3"]),
        ("`train simcse`", "exported SavedModel as `--model`",
         ["train", "simcse", "--model", work / "served", "--train-file", text, "--output",
          work / "k4"]),
        ("`encode`", "LiteRT file as `--model`",
         ["encode", "--model", work / "model.tflite", "--input", text, "--output", work / "k.npy"]),
        ("`evaluate sts`", "static model with `--num-layers 2`",
         ["evaluate", "sts", "--model", static, "--num-layers", "2", "--data", work]),
        ("`export --format transformers`", "static model",
         ["export", "--model", static, "--format", "transformers", "--output", work / "k5"]),
        ("`export --format model2vec`", "Transformer model",
         ["export", "--model", model, "--format", "model2vec", "--output", work / "k6"]),
    ]
    rows = []
    for where, label, argv in cases:
        code, said = cli(*argv)
        rows.append((where, label, code, said.replace(str(work), "$TMP")))
    return rows


def streamed_rows(work, model, only=None):
    """Table rows: each of `streamed_cases` (whose label holds `only`), in a fresh process."""
    write_streamed_inputs(Path(work) / "streamed")
    plugin = write_broken_plugin(Path(work) / "plugin")
    rows = []
    for case in streamed_cases(work, model):
        if only is not None and only not in case.label:
            continue
        done = run_cli(*case.argv, fsize=case.fsize, pythonpath=plugin if case.plugin else None)
        said = last_line(done.stderr)
        if done.returncode == 0 and case.names:  # the line that says it, not the last one
            said = next((line for line in done.stderr.splitlines() if case.names[0] in line),
                        said)
        rows.append((case.where, case.label, done.returncode, said.replace(str(work), "$TMP")))
    return rows


def api(call):
    """Runs `call()`; returns ("ok", repr of the result) or (error type, message)."""
    try:
        result = call()
    except Exception as error:  # the point: show what the user sees
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        # TensorFlow's graph errors start with a generic line; show the assertion's own.
        told = next((line for line in lines if "sentences" in line or "rank" in line), None)
        return type(error).__name__, told or (lines[0] if lines else "")
    return "ok", result


def cell(text, limit=150):
    text = str(text).replace("|", "\\|")
    return text if limit is None or len(text) <= limit else text[: limit - 3] + "..."


def print_table(rows, limit=150):
    print("| where | input | exit code / outcome | what the user gets (last line) |")
    print("|---|---|---|---|")
    for where, label, code, said in rows:
        print(f"| {where} | {label} | {cell(code)} | {cell(said, limit)} |")


def hostile_main():
    """`--hostile`: the hostile folders and the wrong kinds, on copies of the default model."""
    work = Path(tempfile.mkdtemp(prefix="bad_inputs_"))
    try:
        from keras_sentemb import SentenceEncoder
        from keras_sentemb import distill_static
        from keras_sentemb.models.presets import default_model_dir

        encoder = SentenceEncoder.from_preset("default")
        encoder.save(work / "model")
        distill_static(encoder, dims=64).save(work / "static")
        (work / "crlf.txt").write_bytes(b"first line\r\nsecond line\r\n")
        rows = hostile_rows(work, work / "model", default_model_dir(), work / "static")
        rows += wrong_kind_rows(work, work / "model", work / "static")
        print_table(rows, limit=None)  # whole lines
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    if sys.argv[1:] == ["--hostile"]:  # only hostile model folders and models of the wrong kind
        return hostile_main()
    if sys.argv[1:2] == ["--streamed"]:  # only the cases of `streamed_cases`
        # `--streamed --case TEXT`: only the cases whose label holds TEXT.
        only = sys.argv[3] if sys.argv[2:3] == ["--case"] and len(sys.argv) > 3 else None
        work = Path(tempfile.mkdtemp(prefix="bad_inputs_"))
        try:
            from keras_sentemb import SentenceEncoder

            SentenceEncoder.from_preset("default").save(work / "model")
            print_table(streamed_rows(work, work / "model", only), limit=None)  # whole lines
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return
    rows = []
    work = Path(tempfile.mkdtemp(prefix="bad_inputs_"))
    try:
        model = work / "model"
        import numpy as np

        from keras_sentemb import SentenceEncoder
        from keras_sentemb.export import export_saved_model

        encoder = SentenceEncoder.from_preset("default")
        encoder.save(model)

        def broken(name, damage):
            folder = work / name
            shutil.copytree(model, folder)
            damage(folder)
            return folder

        def write(folder, file, data):
            (folder / file).write_bytes(data)

        def truncate(folder, file):
            data = (folder / file).read_bytes()
            (folder / file).write_bytes(data[: len(data) // 3])

        files = {
            "empty.txt": b"",
            "blank_lines.txt": b"\n   \n\t\n",
            "invalid_utf8.txt": b"caf\xe9 au lait\n\xff\xfe broken bytes\n",
            "long.txt": ("word " * 20000 + "\n").encode(),
            "crlf.txt": b"first line\r\nsecond line\r\n",
            "emoji_rtl.txt": "family \U0001F468\u200D\U0001F469\u200D\U0001F467 and \u0645\u0631\u062D\u0628\u0627\n".encode(),
        }
        for name, data in files.items():
            (work / name).write_bytes(data)
        (work / "a_folder").mkdir()
        (work / "existing_file").write_text("not a model folder\n")

        def encode_case(label, *args):
            code, said = cli("encode", "--model", model, *args)
            rows.append(("`encode`", label, code, said))

        encode_case("empty input file", "--input", work / "empty.txt", "--output", work / "e.npy")
        encode_case("only blank lines", "--input", work / "blank_lines.txt", "--output", work / "b.npy")
        encode_case("invalid UTF-8 bytes", "--input", work / "invalid_utf8.txt", "--output", work / "u.npy")
        encode_case("a 100,000-character line", "--input", work / "long.txt", "--output", work / "l.npy")
        encode_case("CRLF line ends", "--input", work / "crlf.txt", "--output", work / "c.npy")
        encode_case("emoji ZWJ sequence + right-to-left text", "--input", work / "emoji_rtl.txt",
                    "--output", work / "r.npy")
        encode_case("input file missing", "--input", work / "missing.txt", "--output", work / "m.npy")
        encode_case("`--output` is a folder", "--input", work / "crlf.txt", "--output", work / "a_folder")
        encode_case("`--output` under /proc", "--input", work / "crlf.txt", "--output", "/proc/x/v.npy")

        model_cases = [
            ("model folder missing", work / "no_such_model"),
            ("0-byte `model.weights.h5`", broken("zero_h5", lambda f: write(f, "model.weights.h5", b""))),
            ("truncated `model.weights.h5`", broken("trunc_h5", lambda f: truncate(f, "model.weights.h5"))),
            ("invalid `sentemb_config.json`", broken("bad_cfg", lambda f: write(f, "sentemb_config.json", b"{not json"))),
            ("0-byte `tokenizer.json`", broken("zero_tok", lambda f: write(f, "tokenizer.json", b""))),
            ("keras-hub preset name, no network", "bert_base_en_uncased"),
            ("`hf://` handle, no network", "hf://sentence-transformers/all-MiniLM-L6-v2"),
        ]
        for label, source in model_cases:
            code, said = cli("encode", "--model", source, "--input", work / "crlf.txt", "--output", work / "x.npy")
            rows.append(("`encode --model`", label, code, said))

        hf = work / "hf_folder"
        hf.mkdir()
        (hf / "config.json").write_text('{"model_type": "bert", ')
        (hf / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n")
        code, said = cli("encode", "--model", hf, "--input", work / "crlf.txt", "--output", work / "x.npy")
        rows.append(("`encode --model`", "Hugging Face folder, invalid `config.json`", code, said))
        (hf / "config.json").write_text(
            '{"model_type": "bert", "vocab_size": 4, "hidden_size": 8, "num_hidden_layers": 1, '
            '"num_attention_heads": 2, "intermediate_size": 16, "max_position_embeddings": 16}'
        )
        (hf / "model.safetensors").write_bytes(os.urandom(256))
        code, said = cli("encode", "--model", hf, "--input", work / "crlf.txt", "--output", work / "x.npy")
        rows.append(("`encode --model`", "Hugging Face folder, random bytes in `model.safetensors`", code, said))

        train = ["train", "ct", "--model", model, "--train-file", work / "crlf.txt", "--steps", "2"]
        train_cases = [
            ("`--output` is an existing file", ["--output", work / "existing_file"]),
            ("`--output` under /proc", ["--output", "/proc/x/model"]),
            ("`--output` in a read-only folder", ["--output", "/sys/model"]),
            ("`--learning-rate -1e-5`", ["--output", work / "t1", "--learning-rate", "-1e-5"]),
            ("`--eval-every 0`", ["--output", work / "t2", "--eval-every", "0"]),
            ("`--steps 0`", ["--output", work / "t3", "--steps", "0"]),
            ("`--batch-size -4`", ["--output", work / "t4", "--batch-size", "-4"]),
        ]
        for label, extra in train_cases:
            code, said = cli(*train, *extra)
            rows.append(("`train ct`", label, code, said))
        code, said = cli("train", "ct", "--model", model, "--train-file", work / "blank_lines.txt",
                         "--output", work / "t5", "--steps", "2")
        rows.append(("`train ct`", "training file with only blank lines", code, said))
        code, said = cli("train", "ct", "--model", model, "--train-file", work / "missing.txt",
                         "--output", work / "t6", "--steps", "2")
        rows.append(("`train ct`", "training file missing", code, said))
        code, said = cli("evaluate", "sts", "--model", model, "--data", work / "no_such_dir")
        rows.append(("`evaluate sts`", "`--data` folder missing", code, said))
        code, said = cli("export", "--model", model, "--output", work / "existing_file")
        rows.append(("`export`", "`--output` is an existing file", code, said))
        rows.extend(streamed_rows(work, model))

        def shape(x):
            return f"array of shape {tuple(np.shape(x))}"

        api_cases = [
            ("`encode([])`", lambda: shape(encoder.encode([]))),
            ("`encode([''])`", lambda: shape(encoder.encode([""]))),
            ("`encode(['ok', None])`", lambda: encoder.encode(["ok", None])),
            ("`encode({'a': 1})`", lambda: encoder.encode({"a": 1})),
            ("`encode('one string')`", lambda: shape(encoder.encode("one string"))),
            ("`encode([b'caf\\xe9'])` (invalid UTF-8 bytes)", lambda: shape(encoder.encode([b"caf\xe9"]))),
            ("`encode(['\\ud800'])` (lone surrogate)", lambda: shape(encoder.encode(["\ud800"]))),
        ]
        from keras_sentemb import fit_ct

        api_cases.append((
            "`fit_ct(..., negatives='in_batch', learning_rate=-1e-5)`",
            lambda: fit_ct(["a b c"] * 8, model=encoder, negatives="in_batch", learning_rate=-1e-5,
                           steps=1, dev=None),
        ))
        for label, call in api_cases:
            kind, result = api(call)
            rows.append(("Python", label, kind, result))

        import tensorflow as tf

        export_dir = export_saved_model(encoder, work / "served")
        serve = tf.saved_model.load(str(export_dir)).signatures["serving_default"]
        for label, value in [
            ("rank-2 input `[['a', 'b'], ['c', 'd']]`", tf.constant([["a", "b"], ["c", "d"]])),
            ("scalar input `'a'`", tf.constant("a")),
            ("empty batch `[]`", tf.constant([], dtype=tf.string)),
        ]:
            kind, result = api(lambda v=value: {k: tuple(t.shape) for k, t in serve(sentences=v).items()})
            rows.append(("SavedModel `serving_default`", label, kind, result))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print_table(rows)


if __name__ == "__main__":
    main()

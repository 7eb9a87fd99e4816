"""Bad inputs, tried for real: what each command gets (the table in docs/results/bad-inputs.md).

Runs the command line (a fresh process per case, as a user would) and the
Python API on the bundled default model and on broken copies of it, and
prints a markdown table: the input, the exit code, and the last line on
stderr (or the result). Nothing is hard-coded: every row is what this run
printed.

    python benchmarks/bad_inputs.py > /tmp/bad_inputs.md     # about 5 minutes on 2 cores
"""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STS = REPO / "keras_sentemb" / "resources" / "STS"


def last_line(text):
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def cli(*args, stdin=None):
    """Runs `keras-sentemb ARGS`; returns (exit code, what it said last)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run(
        [sys.executable, "-m", "keras_sentemb", *map(str, args)],
        capture_output=True, text=True, env=env, input=stdin, timeout=900,
    )
    said = last_line(done.stderr) if done.returncode else (last_line(done.stdout) or last_line(done.stderr))
    return done.returncode, said


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
    return text if len(text) <= limit else text[: limit - 3] + "..."


def main():
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

    print("| where | input | exit code / outcome | what the user gets (last line) |")
    print("|---|---|---|---|")
    for where, label, code, said in rows:
        print(f"| {where} | {label} | {cell(code)} | {cell(said)} |")


if __name__ == "__main__":
    main()

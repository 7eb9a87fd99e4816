"""Static encoders side by side: ours distilled, ours trained, model2vec, from the same teacher.

    ST_PYTHON=PYTHON_WITH_MODEL2VEC python benchmarks/static_vs_model2vec.py \\
        --sentences data/wiki.txt --steps 200
    python benchmarks/static_vs_model2vec.py --ablation      # each distillation step on STS-B dev

The side by side distils ours (`distill_static`, dims 256) and model2vec's
(`model2vec.distill`, pca_dims 256, in its own interpreter: `m2v_side.py`)
from the bundled all-MiniLM-L6-v2, trains ours (`keras-sentemb train static`
on the bundled 10,000 Wikipedia sentences), and measures for each: STS-B
test Spearman (x100, SentEval's protocol), the seconds to encode the first
`--n` sentences of `--sentences` as a whole process (`keras-sentemb encode`
/ a model2vec script; best of 3) and inside a process (best of 3, model2vec
with and without its multiprocessing, the faster kept), the folder's MiB and
the int8 LiteRT file's MiB. One JSON file in benchmarks/results/.

`--ablation` measures what each step of the distillation does on STS-B dev
(never test): no PCA, PCA to 64 / 128 / 256 / 384 (rotation only), no
weighting, Zipf and SIF (counted on the bundled Wikipedia sentences)
weights, and the teacher's output vectors against its pooled hidden states.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from benchmarks._common import cpu_info  # noqa: E402
from benchmarks._common import read_lines  # noqa: E402
from benchmarks._common import shown_path  # noqa: E402
from benchmarks._common import st_python  # noqa: E402

STS = REPO / "keras_sentemb" / "resources" / "STS"
WIKI10K = REPO / "keras_sentemb" / "resources" / "wiki" / "wiki10k.txt"


def env():
    return dict(os.environ, PYTHONPATH=str(REPO), KERAS_SENTEMB_PRECISION="float32",
                TF_CPP_MIN_LOG_LEVEL="3", HF_HUB_OFFLINE="1")


def run(cmd, **kwargs):
    """Wall seconds and stdout of `cmd`; exits with its stderr when it fails."""
    start = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env(), **kwargs)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, cmd[:4]))} ... failed:\n{out.stderr[-3000:]}")
    return time.perf_counter() - start, out.stdout


def sts_sentences(split):
    rows = [line.split("\t") for line in (STS / "STSBenchmark" / f"sts-{split}.csv").read_text(
        encoding="utf-8").splitlines() if line.strip()]
    return sorted({r[5] for r in rows} | {r[6] for r in rows})


def spearman(encode, split="test"):
    from keras_sentemb.evaluation.sts import evaluate_sts

    result = evaluate_sts(encode, STS, tasks=["STSBenchmark"], split=split)
    return round(result["STSBenchmark"][split]["spearman"], 2)


def m2v_spearman(folder, tmp):
    """STS-B test Spearman of a model2vec folder, its vectors made by model2vec."""
    sentences = sts_sentences("test")
    path = Path(tmp) / "sts.txt"
    path.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    run([st_python(), HERE / "m2v_side.py", "encode", folder, path, Path(tmp) / "sts.npy",
         "--no-multiprocessing"])
    table = dict(zip(sentences, np.load(Path(tmp) / "sts.npy")))
    return spearman(lambda batch: np.stack([table[s] for s in batch]))


def folder_mib(path):
    path = Path(path)
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return round(sum(p.stat().st_size for p in files) / 2**20, 2)


def whole_process(cmd, repeats=3):
    return round(min(run(cmd)[0] for _ in range(repeats)), 3)


def ours_in_process(folder, sentences, repeats=3):
    from keras_sentemb.models.static_runtime import StaticTable

    table = StaticTable.from_folder(folder)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        table.encode(sentences)
        times.append(time.perf_counter() - start)
    return round(min(times), 3)


def m2v_in_process(folder, input_path, tmp, repeats=3):
    best = {}
    for flags in ([], ["--no-multiprocessing"]):
        for _ in range(repeats):
            _, out = run([st_python(), HERE / "m2v_side.py", "encode", folder, input_path,
                          Path(tmp) / "m2v.npy", *flags])
            seconds = json.loads(out.strip().splitlines()[-1])["encode_seconds"]
            key = "no_multiprocessing" if flags else "multiprocessing"
            best[key] = min(best.get(key, seconds), seconds)
    return best


def encode_measurements(name, folder, input_path, sentences, tmp):
    """Whole-process and in-process seconds of encoding `input_path` with one model."""
    out = Path(tmp) / "out.npy"
    if name == "model2vec":
        whole = whole_process([st_python(), HERE / "m2v_side.py", "encode", folder, input_path,
                               out])
        inner = m2v_in_process(folder, input_path, tmp)
        return {"whole_process_s": whole, "encode_s": min(inner.values()), "encode_s_by_mode": inner}
    whole = whole_process([sys.executable, "-m", "keras_sentemb", "encode", "--model", folder,
                           "--input", input_path, "--output", out])
    return {"whole_process_s": whole, "encode_s": ours_in_process(folder, sentences)}


def side_by_side(args):
    import keras_sentemb
    from keras_sentemb.models.presets import default_model_dir

    teacher_dir = str(default_model_dir())
    tmp = args.workdir or tempfile.mkdtemp(prefix="static-bench-")
    sentences = read_lines(args.sentences, args.n)
    input_path = Path(tmp) / "input.txt"
    input_path.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    folders = {"ours_distilled": Path(tmp) / "distilled", "ours_trained": Path(tmp) / "trained",
               "model2vec": Path(tmp) / "m2v"}
    teacher = keras_sentemb.SentenceEncoder.from_preset("default")
    seconds = {"ours_distilled": None, "ours_trained": None}  # None: made by an earlier run
    if not folders["ours_distilled"].exists():
        start = time.perf_counter()
        keras_sentemb.distill_static(teacher, dims=args.dims).save(folders["ours_distilled"])
        seconds["ours_distilled"] = round(time.perf_counter() - start, 1)
    if not folders["ours_trained"].exists():
        seconds["ours_trained"] = round(run([
            sys.executable, "-m", "keras_sentemb", "train", "static", "--model", "default",
            "--train-file", WIKI10K, "--output", folders["ours_trained"], "--dims",
            str(args.dims), "--steps", str(args.steps)])[0], 1)
    _, out = run([st_python(), HERE / "m2v_side.py", "distill", teacher_dir, str(args.dims),
                  folders["model2vec"]])
    seconds["model2vec"] = json.loads(out.strip().splitlines()[-1])["distill_seconds"]
    rows = {"teacher": {"sts_b_test": spearman(teacher)}}
    for name, folder in folders.items():
        quality = (m2v_spearman(folder, tmp) if name == "model2vec" else spearman(
            keras_sentemb.StaticEncoder.from_preset(folder)))
        rows[name] = {"sts_b_test": quality, "make_s": seconds[name],
                      "folder_mib": folder_mib(folder),
                      **encode_measurements(name, folder, input_path, sentences, tmp)}
    litert = Path(tmp) / "trained_int8.tflite"
    run([sys.executable, "-m", "keras_sentemb", "export", "--model", folders["ours_trained"],
         "--format", "litert", "--quantize", "int8", "--output", litert])
    rows["ours_trained"]["litert_int8_mib"] = folder_mib(litert)
    int8 = keras_sentemb.StaticEncoder.from_preset(folders["ours_trained"])
    int8.table_dtype = "int8"
    int8.save(Path(tmp) / "trained_int8")
    rows["ours_trained_int8_table"] = {
        "sts_b_test": spearman(keras_sentemb.StaticEncoder.from_preset(Path(tmp) / "trained_int8")),
        "folder_mib": folder_mib(Path(tmp) / "trained_int8")}
    return {"sentences": args.n, "source": shown_path(args.sentences), "dims": args.dims,
            "train_steps": args.steps, "teacher": shown_path(teacher_dir), "rows": rows, **cpu_info()}


def ablation(args):
    """STS-B dev Spearman of each distillation variant (token vectors computed once per kind)."""
    import keras_sentemb
    from keras_sentemb.methods.static import distill as sd
    from keras_sentemb.models.static_encoder import StaticEncoder

    teacher = keras_sentemb.SentenceEncoder.from_preset("default")
    tokenizer = sd.teacher_tokenizer(teacher)
    tokens = [str(t) for t in teacher.tokenizer.get_vocabulary()]
    keep = sd.special_token_mask(teacher)
    weights = {w: sd.token_weights(tokenizer, tokens, w, 1e-4, str(WIKI10K))
               for w in ("none", "zipf", "sif")}
    results = {"teacher": spearman(teacher, "dev")}
    for kind in ("output", "pooled"):
        vectors = sd.teacher_token_vectors(teacher, kind)
        for dims in (None, 64, 128, 256, 384):
            table = vectors if dims is None else sd.pca(vectors, dims)[0]
            for weighting, w in weights.items():
                static = StaticEncoder(table, tokenizer, weights=w, keep=keep)
                name = f"{kind} pca={dims or 'none'} weights={weighting}"
                results[name] = spearman(static, "dev")
                print(name, results[name], file=sys.stderr)
    return {"split": "dev", "sts_b_dev_spearman": results, **cpu_info()}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sentences", default="data/wiki.txt")
    p.add_argument("--n", type=int, default=26000)
    p.add_argument("--dims", type=int, default=256)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--ablation", action="store_true")
    p.add_argument("--output", default=None)
    p.add_argument("--workdir", default=None,
                   help="folder for the models; ours already there are measured, not made again")
    args = p.parse_args()
    os.environ.update(env())
    result = ablation(args) if args.ablation else side_by_side(args)
    name = "static_distill_steps.json" if args.ablation else "static_vs_model2vec.json"
    out = Path(args.output or HERE / "results" / name)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

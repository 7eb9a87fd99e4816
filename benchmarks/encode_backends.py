"""Every CPU inference path side by side: ours per precision against sentence-transformers' backends.

    python benchmarks/encode_backends.py --sentences data/wiki.txt --n 26000 --rounds 2 \
        --st-python ST_VENV/bin/python --out benchmarks/results/encode_backends.json

Each side is a whole process on the same file, as a user runs it:

    ours-default       keras-sentemb encode --model default (precision "auto")
    ours-float32       ... --precision float32
    ours-bfloat16      ... --precision bfloat16 (only where the CPU has native bfloat16)
    ours-int8          ... --precision int8 (oneDNN's int8 matrix multiplies)
    st-torch           sentence-transformers, PyTorch float32
    st-onnx            its ONNX Runtime backend
    st-onnx-qint8      ONNX Runtime, dynamic int8 for this CPU's arch (avx2 / avx512_vnni)
    st-openvino        its OpenVINO backend (bfloat16 on its own where the CPU has it)
    st-openvino-qint8  OpenVINO, static int8 calibrated on local sentences

(the sentence-transformers sides run `st_backend_process.py` with `--st-python`,
a Python with torch and sentence-transformers[onnx,openvino]: never this
process, never a TensorFlow process; their models are prepared once in
`--st-work`). For each side: the whole-process time on `--n` sentences
(median of `--rounds`, sides alternating round by round so that a change of
the machine's load hits all of them), a cold run on `--cold-n` sentences
(median of `--cold-rounds`), the STS-B test Spearman x100 of its vectors
(bundled SentEval STS-B test, cosine) and its share of ours-float32's, the
lowest cosine of its vectors to ours-float32's on the STS-B sentences, peak
RSS, and the CPU (model, flags). One JSON object (`--out`) and a Markdown
table on stdout.
"""

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from scipy import stats

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (  # noqa: E402
    REPO, add_max_isa_argument, apply_max_isa, cpu_info, measure, read_lines, sentences_file,
    shown_path,
)

HERE = Path(__file__).resolve().parent
STSB_TEST = REPO / "keras_sentemb" / "resources" / "STS" / "STSBenchmark" / "sts-test.csv"
OURS = ("default", "float32", "bfloat16", "int8")
THEIRS = ("torch", "onnx", "onnx-qint8", "openvino", "openvino-qint8")
SIDES = tuple(f"ours-{p}" for p in OURS) + tuple(f"st-{b}" for b in THEIRS)


def stsb_test_pairs():
    """(s1, s2, score) of the bundled STS-B test set (SentEval's processed file)."""
    with open(STSB_TEST, encoding="utf-8") as f:
        rows = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        return [(row[5], row[6], float(row[4])) for row in rows]


def ours_env():
    """Our processes' environment: this checkout first, "auto" not pinned."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("KERAS_SENTEMB_PRECISION", None)
    return env


def command(side, inp, outp, args):
    """The whole-process command of `side`."""
    toolkit, _, name = side.partition("-")
    if toolkit == "ours":
        cmd = [sys.executable, "-m", "keras_sentemb", "encode", "--model", "default",
               "--input", inp, "--output", outp]
        return cmd if name == "default" else cmd + ["--precision", name]
    return [args.st_python, str(HERE / "st_backend_process.py"), "--backend", name,
            "--work", args.st_work, "--input", inp, "--output", outp,
            "--batch-size", str(args.st_batch_size)]


PROBE = """
import json
import tensorflow
from keras_sentemb.kernels import native_bfloat16
from keras_sentemb.kernels.report import kernel_report
report = kernel_report()
print(json.dumps({"auto": report["precision"], "int8": report["int8"],
                  "native_bfloat16": native_bfloat16.has_native_bfloat16()}))
"""


def probe_ours():
    """What "auto" computes in here, whether int8 runs, whether bfloat16 is native."""
    out = subprocess.run([sys.executable, "-c", PROBE], env=ours_env(), capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def prepare_theirs(args):
    """Build the sentence-transformers backends' model files once (in `--st-work`)."""
    prepared = Path(args.st_work) / "prepared.json"
    if not prepared.exists():
        subprocess.run([args.st_python, str(HERE / "st_backend_process.py"), "--prepare",
                        "--work", args.st_work], check=True)
    return json.loads(prepared.read_text(encoding="utf-8"))


def write_lines(path, lines):
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def timed(sides, inp, rounds, tmp, args, label):
    """side -> (wall times, peak RSS MiB) over `rounds` alternating rounds."""
    times = {s: [] for s in sides}
    peaks = {s: [] for s in sides}
    for r in range(rounds):
        for side in sides if r % 2 == 0 else sides[::-1]:
            outp = os.path.join(tmp, f"{label}-{side}.npy")
            env = ours_env() if side.startswith("ours") else None
            wall, peak = measure(command(side, inp, outp, args), env or dict(os.environ))
            times[side].append(wall)
            peaks[side].append(peak)
            print(f"{label} round {r} {side}: {wall:.2f} s", file=sys.stderr)
    return times, peaks


def quality(sides, tmp, args):
    """side -> (STS-B test Spearman x100, vectors of the STS-B sentences)."""
    pairs = stsb_test_pairs()
    sentences = sorted({s for a, b, _ in pairs for s in (a, b)})
    index = {s: i for i, s in enumerate(sentences)}
    inp = os.path.join(tmp, "stsb.txt")
    write_lines(inp, sentences)
    out = {}
    for side in sides:
        outp = os.path.join(tmp, f"stsb-{side}.npy")
        env = ours_env() if side.startswith("ours") else dict(os.environ)
        measure(command(side, inp, outp, args), env)
        v = np.load(outp).astype(np.float64)
        v /= np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
        a = v[[index[p[0]] for p in pairs]]
        b = v[[index[p[1]] for p in pairs]]
        spearman = stats.spearmanr((a * b).sum(1), [p[2] for p in pairs]).correlation
        out[side] = (100 * float(spearman), v)
    return out


def markdown(result):
    rows = ["| backend | seconds, {n} sentences | cold, {c} sentences | STS-B test | "
            "% of float32 | min cosine to float32 |".format(n=result["n"], c=result["cold_n"]),
            "|---|---|---|---|---|---|"]
    for side, e in result["sides"].items():
        # Without a float32 side of ours in the run there is no share or cosine to report.
        share = e.get("stsb_share_of_float32")
        cosine = e.get("min_cosine_to_float32")
        rows.append(f"| {side} | {e['median_s']} | {e['cold_median_s']} | {e['stsb_test']:.2f} | "
                    f"{'-' if share is None else f'{share:.2f}'} | "
                    f"{'-' if cosine is None else f'{cosine:.4f}'} |")
    return "\n".join(rows)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sentences", default=None, help="one sentence per line (default data/wiki.txt)")
    p.add_argument("--n", type=int, default=26000)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--cold-n", type=int, default=100)
    p.add_argument("--cold-rounds", type=int, default=3)
    p.add_argument("--sides", default=",".join(SIDES))
    p.add_argument("--st-python", default=os.environ.get("ST_PYTHON", "stref/bin/python"))
    p.add_argument("--st-work", default=str(REPO / "runs" / "st_backends"))
    p.add_argument("--st-batch-size", type=int, default=32)
    p.add_argument("--out", default=str(REPO / "runs" / "encode_backends.json"))
    add_max_isa_argument(p)
    return p, p.parse_args()


def recorded(prepared):
    """The prepared peer models' description as the result records it (paths shown portably)."""
    out = {k: v for k, v in prepared.items() if k != "backends"}
    if out.get("source_model"):
        out["source_model"] = shown_path(out["source_model"])
    if isinstance(out.get("calibration"), dict) and out["calibration"].get("file"):
        out["calibration"] = {**out["calibration"], "file": shown_path(out["calibration"]["file"])}
    return out


def main():
    parser, args = parse_args()
    apply_max_isa(args.max_isa)
    sides = [s.strip() for s in args.sides.split(",") if s.strip()]
    unknown = [s for s in sides if s not in SIDES]
    if unknown:
        parser.error(f"unknown sides {unknown}; the sides are {list(SIDES)}")
    probe = probe_ours()
    if "ours-bfloat16" in sides and not probe["native_bfloat16"]:
        print("ours-bfloat16 left out: this CPU has no native bfloat16", file=sys.stderr)
        sides.remove("ours-bfloat16")
    if "ours-int8" in sides and not probe["int8"]["available"]:
        print(f"ours-int8 left out: {probe['int8']['why']}", file=sys.stderr)
        sides.remove("ours-int8")
    prepared = prepare_theirs(args) if any(s.startswith("st-") for s in sides) else None
    lines = read_lines(sentences_file(args.sentences), args.n)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        scores = quality(sides, tmp, args)
        inp, cold = os.path.join(tmp, "input.txt"), os.path.join(tmp, "cold.txt")
        write_lines(inp, lines)
        write_lines(cold, lines[: args.cold_n])
        times, peaks = timed(sides, inp, args.rounds, tmp, args, "whole")
        cold_times, _ = timed(sides, cold, args.cold_rounds, tmp, args, "cold")
    reference = scores.get("ours-float32")
    result = {"benchmark": "encode_backends", "n": len(lines), "rounds": args.rounds,
              "cold_n": args.cold_n, "cold_rounds": args.cold_rounds,
              "st_batch_size": args.st_batch_size, **cpu_info(), "ours": probe, "theirs": prepared and recorded(prepared),
              "loadavg_before": [round(x, 2) for x in load_before],
              "loadavg_after": [round(x, 2) for x in os.getloadavg()], "sides": {}}
    for side in sides:
        spearman, vectors = scores[side]
        entry = {"median_s": round(statistics.median(times[side]), 2),
                 "all_s": [round(t, 2) for t in times[side]],
                 "cold_median_s": round(statistics.median(cold_times[side]), 2),
                 "cold_all_s": [round(t, 2) for t in cold_times[side]],
                 "peak_rss_mib": round(max(peaks[side])), "stsb_test": round(spearman, 2)}
        if reference is not None:
            entry["stsb_share_of_float32"] = round(100 * spearman / reference[0], 2)
            entry["min_cosine_to_float32"] = round(float((vectors * reference[1]).sum(1).min()), 5)
        result["sides"][side] = entry
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(markdown(result))


if __name__ == "__main__":
    main()

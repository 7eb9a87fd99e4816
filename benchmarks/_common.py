"""Helpers shared by the side-by-side benchmarks (ours in-process, ST in its venv)."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
# wiki100k where docs/data.md puts it (`data/wiki.txt` in the clone); else the bundled 10k.
DEFAULT_SENTENCES = REPO / "data" / "wiki.txt"
BUNDLED_SENTENCES = REPO / "keras_sentemb" / "resources" / "wiki" / "wiki10k.txt"


def shown_path(path):
    """`path` as a result file records it: inside the repository relative to it, else its last
    two parts (a model folder in site-packages, a data file): nothing of one machine's layout."""
    path = Path(path).resolve()
    try:
        return str(path.relative_to(REPO))
    except ValueError:
        return str(Path(*path.parts[-2:]))


def sts_b(encoder, split):
    """STS-B Spearman x100 of `encoder` on `split` of the bundled STS data (float32)."""
    from keras_sentemb.evaluation.sts import evaluate_sts

    result = evaluate_sts(encoder, str(REPO / "keras_sentemb" / "resources" / "STS"),
                          tasks="stsb", split=split, precision="float32")
    return result["STSBenchmark"][split]["spearman"]


def sentences_file(path=None):
    if path:
        return Path(path)
    return DEFAULT_SENTENCES if DEFAULT_SENTENCES.exists() else BUNDLED_SENTENCES


# Environment that keeps both toolkits' vector code at AVX2 on an AVX-512 CPU:
# oneDNN (TensorFlow's and torch's matmuls), MKL (torch's BLAS), ATen's own
# kernels, XLA's code generation (our fused kernels). TensorFlow's other
# (Eigen) kernels are compiled for AVX anyway. An emulation of an AVX2-only
# CPU: same cores, caches and clock, only the instruction sets are capped.
MAX_ISA_ENV = {
    "avx2": {
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "DNNL_MAX_CPU_ISA": "AVX2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
        "ATEN_CPU_CAPABILITY": "avx2",
        "XLA_FLAGS": "--xla_cpu_max_isa=AVX2",
    },
}
MAX_ISA_MARK = "KERAS_SENTEMB_BENCH_MAX_ISA"


def add_max_isa_argument(parser):
    parser.add_argument("--max-isa", choices=sorted(MAX_ISA_ENV), default=None,
                        help="cap both sides' vector instructions (emulates an AVX2-only "
                             "CPU on an AVX-512 one); the process re-runs itself with the cap")


def apply_max_isa(isa):
    """Re-run this script with `MAX_ISA_ENV[isa]` set (it must be set before start).

    The restarted process first checks the cap on the code XLA generates (our
    fused kernels): a kernel compiled under the cap must use no AVX-512
    register (`xla_vector_registers`); else the run stops, since its numbers
    would not be an AVX2 emulation.
    """
    if isa is None:
        return
    if os.environ.get(MAX_ISA_MARK) == isa:
        registers = xla_vector_registers()
        if registers == "zmm":
            raise SystemExit(f"--max-isa {isa}: XLA still generates AVX-512 (zmm) code under "
                             f"XLA_FLAGS={os.environ.get('XLA_FLAGS')!r}; not an AVX2 emulation")
        return
    env = dict(os.environ, **{MAX_ISA_MARK: isa})
    for key, value in MAX_ISA_ENV[isa].items():
        env[key] = f"{env[key]} {value}" if key == "XLA_FLAGS" and env.get(key) else value
    os.execve(sys.executable, [sys.executable, *sys.argv], env)


WRAPPER = (
    "import os, resource, subprocess, sys, json\n"
    "p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)\n"
    "_, err = p.communicate()\n"
    "ru = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "sys.stderr.write(err.decode('utf-8', 'replace')[-2000:])\n"
    "print(json.dumps({'rc': p.returncode, 'maxrss_kib': ru.ru_maxrss}))\n"
)


def measure(cmd, env):
    """`(wall seconds, peak RSS MiB)` of `cmd` as a whole process; exits with its stderr if it fails."""
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", WRAPPER, *cmd], env=env, capture_output=True,
                         text=True)
    wall = time.perf_counter() - start
    try:
        info = json.loads(out.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        info = {"rc": out.returncode, "maxrss_kib": 0}
    if info["rc"] != 0:
        raise SystemExit(f"{' '.join(cmd[:4])} ... failed:\n{out.stderr[-2000:]}")
    return wall, info["maxrss_kib"] / 1024


def cpu_info():
    """What the CPU is and which vector instructions it has (speed ratios depend on them).

    TensorFlow's and torch's CPU kernels differ most on AVX-512 (and native
    bfloat16 needs AVX512-BF16 or AMX), so every speed record names them,
    and the cap a run put on them (`--max-isa`), if any.
    """
    model, flags = None, set()
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as f:
            for line in f:
                if model is None and line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                elif not flags and line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                if model is not None and flags:
                    break
    return {"cpus": os.cpu_count(), "cpu_model": model,
            "cpu_flags": {f: f in flags for f in
                          ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16",
                           "amx_bf16", "amx_int8", "amx_tile")},
            "max_isa": os.environ.get(MAX_ISA_MARK)}


# A fused kernel of the kind `keras_sentemb.models` compiles (GELU of a matmul's output).
_XLA_PROBE = """
import tensorflow as tf
f = tf.function(lambda x, w: tf.nn.gelu(tf.matmul(x, w), approximate=False), jit_compile=True)
f(tf.ones([64, 384]), tf.ones([384, 384])).numpy()
"""


def widest_vector_registers(disassembly):
    """'zmm' (AVX-512), 'ymm' (AVX/AVX2), 'xmm' or None: the widest registers in objdump text."""
    for name in ("zmm", "ymm", "xmm"):
        if f"%{name}" in disassembly:
            return name
    return None


def xla_vector_registers(env=None):
    """The widest vector registers in the code XLA compiles in a process with `env`.

    Compiles one fused kernel in a fresh process with `--xla_dump_to`, then
    disassembles the object files XLA wrote (binutils' objdump). None when
    objdump is not installed or XLA wrote no object file.
    """
    import shutil
    import tempfile

    objdump = shutil.which("objdump")
    if objdump is None:
        return None
    env = dict(os.environ if env is None else env)
    with tempfile.TemporaryDirectory() as dump:
        flags = env.get("XLA_FLAGS", "")
        env["XLA_FLAGS"] = f"{flags} --xla_dump_to={dump}".strip()
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        subprocess.run([sys.executable, "-c", _XLA_PROBE], env=env, check=True,
                       capture_output=True, timeout=300)
        objects = sorted(Path(dump).glob("*.o"))
        if not objects:
            return None
        text = subprocess.run([objdump, "-d", *map(str, objects)], capture_output=True,
                              text=True, check=True).stdout
    return widest_vector_registers(text)


def read_lines(path, n):
    """The first `n` non-empty lines of `path` (all of them when `n` is infinite).

    A file with fewer than a finite `n` lines is an error, not a smaller run:
    a figure labelled "26,000 sentences" must have encoded 26,000.
    """
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line:
                out.append(line)
                if len(out) >= n:
                    break
    if len(out) < n and n != float("inf"):
        raise SystemExit(
            f"{path} holds {len(out)} sentences, fewer than the {n} asked for; "
            "pass a larger file with --sentences (e.g. data/wiki.txt, see docs/data.md)."
        )
    return out


def st_python(explicit=None):
    """The Python of a venv with torch + sentence-transformers (never our dependency)."""
    return explicit or os.environ.get("ST_PYTHON", "stref/bin/python")


def run_st(script, args, python=None):
    """Run an ST-side script and return its JSON line (None if ST is unavailable)."""
    python = st_python(python)
    if not Path(python).exists():
        print(f"sentence-transformers Python not found at {python}; set ST_PYTHON", file=sys.stderr)
        return None
    cmd = [python, str(HERE / script)] + [str(a) for a in args]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def our_encode_rate(encoder, sentences, repeats, **kwargs):
    """Best sentences/s of `encoder.encode(sentences, **kwargs)` over `repeats` runs after a warm-up."""
    import time

    encoder.encode(sentences, **kwargs)
    best = 0.0
    for _ in range(repeats):
        t = time.perf_counter()
        encoder.encode(sentences, **kwargs)
        best = max(best, len(sentences) / (time.perf_counter() - t))
    return best


def configure_ours(threads=None, plain_gelu=False, parallel_batches=None):
    """Our side's knobs, set before TensorFlow runs anything.

    `threads`: TensorFlow's intra- and inter-op threads, one batch at a time
    (None: as `keras-sentemb encode` runs, `cpu_threads.configure_encode_threads`:
    `parallel_batches` batches side by side, each on its share of the cores).
    `plain_gelu`: keras-hub's composed GELU ops instead of the fused kernels
    (`keras_sentemb.kernels.fused_gelu`). TensorFlow's oneDNN kernels are
    turned on where the command line turns them on
    (`kernels.onednn_opts.enable_onednn_opts`; a `TF_ENABLE_ONEDNN_OPTS` in the
    environment is kept). Returns the `parallel_batches` to pass to `encode`.
    """
    if plain_gelu:
        os.environ["KERAS_SENTEMB_PLAIN_GELU"] = "1"
    from keras_sentemb.kernels.onednn_opts import enable_onednn_opts

    enable_onednn_opts()
    import tensorflow as tf

    from keras_sentemb.kernels.cpu_threads import check_parallel_batches
    from keras_sentemb.kernels.cpu_threads import configure_encode_threads

    if threads:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
        return 1 if parallel_batches is None else parallel_batches
    parallel_batches = check_parallel_batches(parallel_batches)
    configure_encode_threads(parallel_batches)
    return parallel_batches


def st_encode_rates(path, n, batch_size, max_length, repeats, python=None, threads=None):
    """sentence-transformers' encode speed (sentences/s) in `repeats` runs; [] if ST is unavailable."""
    rates = []
    for _ in range(repeats):
        st = run_st("st_encode.py", ["--sentences", path, "--n", n, "--batch-size", batch_size,
                                     "--max-length", max_length,
                                     *(["--threads", threads] if threads else [])], python)
        if st is None:
            break
        rates.append(st["sentences_per_s"])
    return rates

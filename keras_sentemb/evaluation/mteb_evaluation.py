"""MTEB's own evaluators on a keras_sentemb encoder: `evaluate_mteb`.

MTEB (the Massive Text Embedding Benchmark, `pip install mteb`) runs on
PyTorch; this process holds the encoder on TensorFlow, and the two never
share a process. `evaluate_mteb` therefore runs MTEB in a child process
(`keras_sentemb.evaluation.mteb_runner`) and encodes what it asks for here,
in the precision asked for. The scores are MTEB's (its STS and retrieval
evaluators, its metrics), and with `output=` the results are written in
MTEB's own layout (`OUTPUT/results/ORG__NAME/REVISION/TASK.json`, what
`mteb.load_results` and the MTEB leaderboard read).

Tasks are MTEB's by name (their data comes from the Hugging Face Hub, as in
MTEB), or local data scored by MTEB's evaluators (`data=`): the STS tasks of a
SentEval-style folder, or a BEIR-layout retrieval folder.
"""

import json
import os
import subprocess
import sys
import tempfile

from keras_sentemb.evaluation.mteb_runner import PROMPT_TYPES  # noqa: F401 (documented keys)
from keras_sentemb.evaluation.mteb_runner import check_prompts
from keras_sentemb.evaluation.mteb_runner import stderr_fd
from keras_sentemb.evaluation.mteb_wire import serve
from keras_sentemb.missing_dependency import is_installed
from keras_sentemb.missing_dependency import missing_dependency

DEFAULT_STS_TASK = "STSBenchmark"


def _is_beir_folder(path):
    return os.path.isfile(os.path.join(path, "corpus.jsonl"))


def local_task_specs(data, tasks=None, split="test"):
    """The local tasks of `data` as the child process builds them (see `mteb_runner.local_task`).

    Args:
        data: str. A BEIR folder (`corpus.jsonl`, `queries.jsonl`,
            `qrels/SPLIT.tsv`): one retrieval task, `local_FOLDER`; or a
            SentEval-style folder or STS file: one STS task per name of
            `tasks` (default `STSBenchmark`), `local_TASK`. STS12-16's subsets
            are pooled into one set, as MTEB's own STS12-16 are.
        tasks: list of str or None. STS task names (`keras_sentemb.evaluate_sts`'s).
        split: str. `test`, `dev`, `train`, or several joined by commas
            (STS), `test` or `dev` (retrieval). Defaults to `"test"`.

    Returns:
        list of dict.
    """
    from keras_sentemb.evaluation import beir
    from keras_sentemb.evaluation import sts

    splits = [s.strip() for s in split.split(",") if s.strip()]
    if _is_beir_folder(data):
        if tasks:
            raise ValueError("a BEIR folder is one retrieval task; --tasks does not apply to it")
        if len(splits) != 1:
            raise ValueError(f"a retrieval folder is scored on one split, got {split!r}")
        loaded = beir.load_beir(data, split=splits[0])
        return [{"kind": "retrieval", "split": splits[0],
                 "name": f"local_{os.path.basename(os.path.normpath(data))}",
                 "corpus": loaded.corpus, "queries": loaded.queries, "qrels": loaded.qrels}]
    specs = []
    for task in tasks or [DEFAULT_STS_TASK]:
        name = sts.resolve_task_name(task)
        columns = {}
        for one in splits:
            pairs = sts.load_sts_pairs(data, name, one)
            if isinstance(pairs, dict):  # STS12-16: subsets, pooled
                pairs = [pair for subset in pairs.values() for pair in subset]
            columns[one] = {"sentence1": [p[0] for p in pairs], "sentence2": [p[1] for p in pairs],
                            "score": [float(p[2]) for p in pairs]}
        specs.append({"kind": "sts", "name": f"local_{name}", "splits": columns,
                      "min_score": 0, "max_score": 5})
    return specs


def _model_name(encoder, name):
    if name:
        return name
    source = getattr(encoder, "source", None) or getattr(encoder, "name", None) or "model"
    return os.path.basename(os.path.normpath(str(source))) or "model"


def evaluate_mteb(encoder, tasks=None, *, data=None, split="test", output=None,
                  precision="float32", batch_size=128, prompts=None, name=None, revision=None):
    """Scores `encoder` with MTEB's own evaluators; returns their scores.

    MTEB runs in a child process (it runs on PyTorch, which never shares a
    process with TensorFlow); every text it asks for is encoded here, by
    `encoder.encode(..., precision=precision)`, in one call per request (so
    in the encoder's own length-sorted batches).

    Args:
        encoder: a `SentenceEncoder` (anything with `encode(texts,
            batch_size=..., precision=..., show_progress=...)`).
        tasks: list of str or None. MTEB task names (`mteb.get_tasks`; their
            data is downloaded from the Hugging Face Hub by MTEB); with
            `data`, the STS tasks of that folder (default `STSBenchmark`).
        data: str or None. Local data instead of MTEB's: a BEIR folder or a
            SentEval-style STS folder (see `local_task_specs`). Defaults to
            `None`.
        split: str. The split(s) of `data`. Defaults to `"test"`.
        output: str or None. A folder for MTEB's results layout; `None`
            writes nothing.
        precision: str. What the encoder computes in: `"float32"` (the
            default: the same scores on every CPU), `"bfloat16"`, `"int8"`,
            `"auto"`. Recorded in the results' `experiment_kwargs`.
        batch_size: int. Sentences per forward pass. Defaults to `128`.
        prompts: dict or None. MTEB prompt key -> prefix of every text of that
            kind: `"query"` and `"document"` (retrieval), a task type
            (`"STS"`), a task name, or `"TASK-query"`; MTEB's order of
            precedence. Defaults to `None` (no prefix).
        name: str or None. The model's name in the results (default: its
            folder's name, under `keras-sentemb/`).
        revision: str or None. The revision folder of the results.

    Returns:
        dict: `model`, `revision`, `precision`, `tasks` (task -> `main_score`
        x100, `splits` (split -> main score x100) and `scores`, MTEB's scores
        as it reports them, on MTEB's 0-1 scale).

    Raises:
        MissingDependencyError: `mteb` is not installed (one line: how to
            install it).
        ValueError: a task MTEB does not know, bad local data, bad prompts.

    Examples:

    ```python
    import keras_sentemb

    encoder = keras_sentemb.SentenceEncoder.from_preset("default")
    result = keras_sentemb.evaluate_mteb(encoder, data="keras_sentemb/resources/STS", split="dev")
    print(result["tasks"]["local_STSBenchmark"]["main_score"])  # 86.71, as evaluate_sts
    ```

    References:
        - [Muennighoff et al., 2023. MTEB: Massive Text Embedding Benchmark](https://arxiv.org/abs/2210.07316)
    """
    if not is_installed("mteb"):  # not imported here: it is slow to import
        raise missing_dependency("mteb", "MTEB evaluation", "mteb")
    check_prompts(prompts)
    if isinstance(tasks, str):
        tasks = [t.strip() for t in tasks.split(",") if t.strip()]
    if data is None:
        if not tasks:
            raise ValueError("name at least one MTEB task (tasks=...), or give local data (data=...)")
        task_specs = list(tasks)
    else:
        if not os.path.exists(data):
            raise ValueError(f"data not found: {data}")
        task_specs = local_task_specs(data, tasks, split)
    dim = getattr(encoder, "output_dim", None)
    meta = {"name": _model_name(encoder, name), "revision": revision,
            "embed_dim": int(dim) if dim is not None else None,
            "max_tokens": getattr(encoder, "max_length", None), "precision": precision}
    spec = {"tasks": task_specs, "meta": meta, "prompts": prompts,
            "output": os.path.abspath(output) if output else None, "batch_size": batch_size}

    def encode(texts):
        return encoder.encode(texts, batch_size=batch_size, precision=precision,
                              show_progress=False)

    with tempfile.TemporaryDirectory(prefix="keras_sentemb_mteb_") as workdir:
        spec_path, summary_path = (os.path.join(workdir, n) for n in ("spec.json", "summary.json"))
        with open(spec_path, "w", encoding="utf-8") as f:
            json.dump(spec, f)
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        command = [sys.executable, "-m", "keras_sentemb.evaluation.mteb_runner", "--spec", spec_path,
                   "--summary", summary_path, "--requests-fd", str(req_w), "--replies-fd",
                   str(rep_r), "--workdir", workdir]
        env = dict(os.environ, USE_TF="0", TOKENIZERS_PARALLELISM="false")
        process = subprocess.Popen(command, pass_fds=(req_w, rep_r), stdout=stderr_fd(),
                                   env=env)
        os.close(req_w)
        os.close(rep_r)
        with os.fdopen(req_r, "rb") as requests, os.fdopen(rep_w, "wb") as replies:
            try:
                serve(encode, requests, replies, workdir)
            except BrokenPipeError:
                pass  # the child ended early: its summary says why
        code = process.wait()
        if not os.path.isfile(summary_path):
            raise RuntimeError(f"the MTEB process ended (status {code}) without a result; "
                               "its messages are above")
        with open(summary_path, encoding="utf-8") as f:
            summary = json.load(f)
    if not summary["ok"]:
        raise ValueError(f"MTEB: {summary['error']}")
    return {"model": summary["model"], "revision": summary["revision"], "precision": precision,
            "tasks": summary["tasks"]}

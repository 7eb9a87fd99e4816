"""The PyTorch side of an MTEB evaluation: `mteb.evaluate` with a keras_sentemb encoder.

This module never imports TensorFlow (see `mteb_wire`): the encoder it hands
to MTEB sends every encode request to a TensorFlow process. Two ways in:

- `keras_sentemb.evaluate_mteb(...)` (and `keras-sentemb evaluate mteb`)
  runs this module as a child program (`python -m
  keras_sentemb.evaluation.mteb_runner`) and answers its requests from the
  encoder it holds.
- `keras_sentemb.mteb_model(MODEL)` in a program of your own that runs MTEB
  (a process without TensorFlow) starts the TensorFlow side itself
  (`keras_sentemb.cli.mteb_worker`) and returns the encoder object for
  `mteb.evaluate`.

Besides MTEB's own tasks (by name, data from the Hugging Face Hub), two
kinds of local task read their data from files here and are scored by MTEB's
own evaluators: STS pairs (`AbsTaskSTS`) and a BEIR-layout retrieval folder
(`AbsTaskRetrieval`).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

from keras_sentemb.evaluation.mteb_wire import EncodeClient
from keras_sentemb.missing_dependency import import_optional

# The prompt types of MTEB (`mteb.types.PromptType` values) a prompt can name.
PROMPT_TYPES = ("query", "document")
_CLASSES = {}


def _mteb():
    return import_optional("mteb", "MTEB evaluation", "mteb")


def model_meta(name, revision=None, embed_dim=None, max_tokens=None, precision=None):
    """The `mteb.ModelMeta` of a keras_sentemb encoder (cosine similarity, TensorFlow).

    Args:
        name: str. The model's name in MTEB's results (`"ORG/NAME"`; a name
            without `/` is put under `keras-sentemb/`).
        revision: str or None. Its revision folder in the results. Defaults
            to `None` (MTEB's `no_revision_available`).
        embed_dim: int or None. The vectors' dimension.
        max_tokens: int or None. The longest input in tokens.
        precision: str or None. What the encoder computed in; recorded as an
            experiment setting (`experiment_kwargs`), so runs in different
            precisions land in different result folders.

    Returns:
        `mteb.ModelMeta`.
    """
    _mteb()
    from mteb.models.model_meta import ModelMeta
    from mteb.models.model_meta import ScoringFunction

    if "/" not in name:
        name = f"keras-sentemb/{name}"
    overwrites = {"name": name, "revision": revision, "embed_dim": embed_dim,
                  "max_tokens": max_tokens, "framework": ["TensorFlow"],
                  "similarity_fn_name": ScoringFunction.COSINE, "modalities": ["text"]}
    if precision is not None:
        overwrites["experiment_kwargs"] = {"precision": precision}
    return ModelMeta.create_empty(overwrites=overwrites)


def encoder_class():
    """The MTEB encoder class (an `mteb.models.AbsEncoder`), made once `mteb` is imported."""
    if "encoder" in _CLASSES:
        return _CLASSES["encoder"]
    _mteb()
    from mteb.models.abs_encoder import AbsEncoder
    from mteb.models.abs_encoder import get_prompt

    class KerasSentembEncoder(AbsEncoder):
        """An MTEB encoder whose vectors come from a keras_sentemb encoder in another process.

        Args:
            client: `EncodeClient`. The pipe to the TensorFlow process.
            meta: `mteb.ModelMeta`. The model's metadata (`model_meta`).
            prompts: dict or None. MTEB's prompt keys (a task name, a task
                type, `query` / `document`, or `TASK-query`) -> the prefix put
                before every text of that kind; resolved as MTEB resolves a
                sentence-transformers model's prompts.
            close: callable or None. Called by `close()` (ends the other process).
        """

        def __init__(self, client, meta, prompts=None, close=None):
            self.client, self.mteb_model_meta = client, meta
            self.model_prompts = dict(prompts) if prompts else None
            self._close = close

        def encode(self, inputs, *, task_metadata, hf_split, hf_subset, prompt_type=None,
                   **kwargs):
            texts = []
            for batch in inputs:
                texts.extend(batch["text"])
            prompt = get_prompt(self.model_prompts, task_metadata, prompt_type)
            return self.client.encode(texts, prompt)

        def close(self):
            """Ends the TensorFlow process this encoder talks to (if it started it)."""
            self.client.close()
            if self._close is not None:
                self._close()
                self._close = None

    _CLASSES["encoder"] = KerasSentembEncoder
    return KerasSentembEncoder


def _task_metadata(name, task_type, main_score, splits, description):
    _mteb()
    from mteb.abstasks.task_metadata import TaskMetadata

    return TaskMetadata(
        name=name, description=description, reference=None,
        dataset={"path": f"local/{name}", "revision": "local"}, type=task_type,
        category="t2t", modalities=["text"], eval_splits=list(splits), eval_langs=["eng-Latn"],
        main_score=main_score, date=None, domains=None, task_subtypes=None, license=None,
        annotations_creators=None, dialect=None, sample_creation=None, bibtex_citation=None,
    )


def local_task(spec):
    """An MTEB task over local data: `spec` is a dict (see `keras_sentemb.evaluation.mteb_evaluation`).

    Args:
        spec: dict. `{"kind": "sts", "name": N, "splits": {SPLIT: {"sentence1":
            [...], "sentence2": [...], "score": [...]}}, "min_score": 0,
            "max_score": 5}` or `{"kind": "retrieval", "name": N, "split":
            SPLIT, "corpus": {id: {"title", "text"}}, "queries": {id: text},
            "qrels": {query id: {document id: relevance}}}`.

    Returns:
        An `mteb.AbsTask` whose data is loaded.
    """
    _mteb()
    from datasets import Dataset
    from datasets import DatasetDict

    if spec["kind"] == "sts":
        from mteb.abstasks.sts import AbsTaskSTS

        class LocalSTS(AbsTaskSTS):
            metadata = _task_metadata(spec["name"], "STS", "cosine_spearman", spec["splits"],
                                      "Local sentence pairs scored for similarity.")
            min_score, max_score = spec.get("min_score", 0), spec.get("max_score", 5)

            def load_data(self, num_proc=None, **kwargs):
                self.dataset = DatasetDict({split: Dataset.from_dict(columns)
                                            for split, columns in spec["splits"].items()})
                self.data_loaded = True

        return LocalSTS()
    if spec["kind"] == "retrieval":
        from mteb.abstasks.retrieval import AbsTaskRetrieval
        from mteb.abstasks.retrieval_dataset_loaders import RetrievalSplitData

        class LocalRetrieval(AbsTaskRetrieval):
            metadata = _task_metadata(spec["name"], "Retrieval", "ndcg_at_10", [spec["split"]],
                                      "A local BEIR-layout retrieval folder.")

            def load_data(self, num_proc=None, **kwargs):
                corpus = Dataset.from_list([
                    {"id": key, "title": doc.get("title", ""), "text": doc["text"]}
                    for key, doc in spec["corpus"].items()])
                queries = Dataset.from_list([{"id": key, "text": text}
                                             for key, text in spec["queries"].items()])
                split = RetrievalSplitData(corpus=corpus, queries=queries,
                                           relevant_docs=spec["qrels"], top_ranked=None)
                self.dataset = {"default": {spec["split"]: split}}
                self.data_loaded = True

        return LocalRetrieval()
    raise ValueError(f"unknown local task kind {spec['kind']!r}; expected 'sts' or 'retrieval'")


def build_tasks(tasks):
    """MTEB tasks from names (`mteb.get_tasks`) and local specs (`local_task`)."""
    mteb = _mteb()
    names = [t for t in tasks if isinstance(t, str)]
    built = []
    if names:
        try:
            built.extend(mteb.get_tasks(tasks=names))
        except KeyError as e:
            raise ValueError(f"unknown MTEB task: {e.args[0] if e.args else e}") from None
    built.extend(local_task(t) for t in tasks if not isinstance(t, str))
    return built


def run_tasks(encoder, tasks, output=None, batch_size=32):
    """Runs `mteb.evaluate`; returns `{task: {"main_score": x100, "scores": MTEB's scores}}`.

    Args:
        encoder: an MTEB encoder (`encoder_class()` instance).
        tasks: list of `mteb.AbsTask`.
        output: str or None. MTEB's results folder (`ResultCache`: it writes
            `OUTPUT/results/ORG__NAME/REVISION/TASK.json`); `None` writes none.
        batch_size: int. MTEB's loader batch (the encoder encodes each
            request whole, in its own length-sorted batches).
    """
    mteb = _mteb()
    cache = mteb.ResultCache(cache_path=output) if output else None
    result = mteb.evaluate(encoder, tasks, cache=cache, overwrite_strategy="always",
                           encode_kwargs={"batch_size": batch_size}, show_progress_bar=False)
    summary = {}
    for task_result in result.task_results:
        splits = {split: round(100 * sum(s["main_score"] for s in rows) / len(rows), 4)
                  for split, rows in task_result.scores.items() if rows}
        summary[task_result.task_name] = {
            "main_score": round(100 * task_result.get_score(), 4),
            "splits": splits,
            "scores": task_result.scores,
        }
    return summary


def mteb_model(model, *, precision="auto", pooling=None, max_length=None, num_layers=None,
               batch_size=128, prompts=None, name=None, revision=None):
    """An MTEB encoder for MODEL, for `mteb.evaluate` in a program without TensorFlow.

    The encoder runs in a TensorFlow process that this call starts (MTEB runs
    on PyTorch; the two never share a process); `close()` ends it (so does
    the end of this program). In a process that already imported TensorFlow,
    use `keras_sentemb.evaluate_mteb` instead, which runs MTEB in a child process.

    Args:
        model: str. What `--model` takes: `"default"`, a preset, a folder.
        precision: str. What the encoder computes in (`"auto"`, `"float32"`,
            `"bfloat16"`, `"int8"`). Defaults to `"auto"`.
        pooling: str or None. Overrides the model's pooling.
        max_length: int or None. Truncation length in tokens.
        num_layers: int or None. Keep the first N Transformer layers.
        batch_size: int. Sentences per forward pass. Defaults to `128`.
        prompts: dict or None. MTEB prompt key (`query`, `document`, a task
            name or type, `TASK-query`) -> prefix.
        name: str or None. The name in MTEB's results (default: the folder's
            name, under `keras-sentemb/`).
        revision: str or None. The revision folder in MTEB's results.

    Returns:
        An `mteb.models.AbsEncoder` (with `mteb_model_meta`).

    Examples:

    ```python
    import mteb
    import keras_sentemb

    model = keras_sentemb.mteb_model("runs/ct400", precision="float32")
    results = mteb.evaluate(model, mteb.get_tasks(tasks=["STSBenchmark"]))
    model.close()
    ```
    """
    if "tensorflow" in sys.modules:
        raise RuntimeError(
            "mteb_model runs MTEB beside a TensorFlow process, but this process already imported "
            "TensorFlow (it and PyTorch must not share a process); use "
            "keras_sentemb.evaluate_mteb(encoder, tasks) here instead")
    check_prompts(prompts)
    cls = encoder_class()
    workdir = tempfile.mkdtemp(prefix="keras_sentemb_mteb_")
    req_r, req_w = os.pipe()
    rep_r, rep_w = os.pipe()
    command = [sys.executable, "-m", "keras_sentemb.cli.mteb_worker", "--model", str(model),
               "--precision", precision, "--batch-size", str(batch_size),
               "--requests-fd", str(req_r), "--replies-fd", str(rep_w), "--workdir", workdir]
    for flag, value in (("--pooling", pooling), ("--max-length", max_length),
                        ("--num-layers", num_layers)):
        if value is not None:
            command += [flag, str(value)]
    process = subprocess.Popen(command, pass_fds=(req_r, rep_w), stdout=stderr_fd())
    os.close(req_r)
    os.close(rep_w)
    requests, replies = os.fdopen(req_w, "wb"), os.fdopen(rep_r, "rb")
    hello = replies.readline()
    if not hello:
        process.wait()
        replies.close()
        requests.close()
        raise RuntimeError(f"the TensorFlow side could not load {model} (its message is above)")
    info = json.loads(hello)

    def close():
        process.wait()
        for name_ in os.listdir(workdir):
            os.remove(os.path.join(workdir, name_))
        os.rmdir(workdir)

    meta = model_meta(name or info["name"], revision, info["dim"], info["max_length"],
                      info["precision"])
    return cls(EncodeClient(requests, replies, workdir), meta, prompts, close=close)


def stderr_fd():
    """The file descriptor of this process's stderr (2 when `sys.stderr` has none, as under capture)."""
    try:
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return 2


def check_prompts(prompts):
    """Fails with one line when `prompts` is not a dict of str -> str."""
    if prompts is None:
        return
    if not isinstance(prompts, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in prompts.items()):
        raise ValueError(f"prompts must be a dict of MTEB prompt key -> prefix (str -> str); "
                         f"received {prompts!r}")


def main(argv=None):
    """The child program of `evaluate_mteb`: one JSON spec in, one JSON summary out."""
    parser = argparse.ArgumentParser(prog="python -m keras_sentemb.evaluation.mteb_runner")
    parser.add_argument("--spec", required=True)
    parser.add_argument("--summary", required=True)
    parser.add_argument("--requests-fd", type=int, required=True)
    parser.add_argument("--replies-fd", type=int, required=True)
    parser.add_argument("--workdir", required=True)
    args = parser.parse_args(argv)
    with open(args.spec, encoding="utf-8") as f:
        spec = json.load(f)
    client = EncodeClient(os.fdopen(args.requests_fd, "wb"), os.fdopen(args.replies_fd, "rb"),
                          args.workdir)
    try:
        tasks = build_tasks(spec["tasks"])
        meta = model_meta(**spec["meta"])
        encoder = encoder_class()(client, meta, spec.get("prompts"))
        summary = {"ok": True, "model": meta.name, "revision": meta.revision,
                   "tasks": run_tasks(encoder, tasks, spec.get("output"), spec.get("batch_size", 32))}
    except (ValueError, KeyError, ImportError, RuntimeError) as e:
        summary = {"ok": False, "error": str(e).splitlines()[0] if str(e) else type(e).__name__}
    finally:
        client.close()
    with open(args.summary, "w", encoding="utf-8") as f:
        json.dump(summary, f)
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())

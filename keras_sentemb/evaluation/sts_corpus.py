"""The unlabeled texts of STS benchmarks: ConSERT's unsupervised training corpus."""

from keras_sentemb.evaluation.sts import STS_TASKS
from keras_sentemb.evaluation.sts import STS_YEAR_TASKS
from keras_sentemb.evaluation.sts import load_sts_pairs
from keras_sentemb.evaluation.sts import resolve_task_name


def sts_unlabeled_texts(data_dir, tasks=STS_TASKS, missing="skip"):
    """Every distinct sentence of the STS sets found in `data_dir`, labels dropped.

    ConSERT's unsupervised setting trains on "the unlabeled texts from 7 STS
    datasets" (Yan et al. 2021, section 4.1 and Table 1: 89,192 texts from
    STS12-16, STS-B and SICK-R). This reads SentEval's layout: STS12-16
    (their test subsets, the only split), STS-B and SICK-R (train, dev and
    test, whichever exist), and returns the sentences in reading order with
    duplicates removed.

    Args:
        data_dir: str or path. SentEval's STS folder (or `data/downstream`,
            the parent of `STS/` and `SICK/`).
        tasks: sequence of str. The STS sets to read (`evaluate_sts` names).
            Defaults to the seven of the papers' tables.
        missing: str. `"skip"` (read the sets that exist; raise only when
            none does) or `"raise"` (every set in `tasks` must exist).
            Defaults to `"skip"`.

    Returns:
        A tuple `(sentences, counts)`: the distinct sentences (list of str)
        and a dict `{task: {"splits": [...], "sentences": n}}` of what was
        read (`n` counts both sentences of every pair, duplicates included;
        sets not found are absent).

    Raises:
        ValueError: for an unknown task or `missing` value.
        FileNotFoundError: when no set is found (or, with
            `missing="raise"`, when one is missing).

    Examples:

    ```python
    sentences, counts = sts_unlabeled_texts("SentEval/data/downstream")
    encoder = keras_sentemb.fit_consert(sentences)
    ```

    References:
        - [Yan et al., 2021. ConSERT](https://arxiv.org/abs/2105.11741),
          section 4.1 and Table 1.
    """
    if missing not in ("skip", "raise"):
        raise ValueError(f"`missing` must be 'skip' or 'raise'. Received: {missing!r}.")
    names = [resolve_task_name(t) for t in tasks]
    seen, sentences, counts, errors = set(), [], {}, []
    for task in names:
        groups = {}
        if task in STS_YEAR_TASKS:
            try:
                groups = load_sts_pairs(data_dir, task, "test")
            except FileNotFoundError as error:
                errors.append(str(error))
        else:
            for split in ("train", "dev", "test"):
                try:
                    groups[split] = load_sts_pairs(data_dir, task, split)
                except FileNotFoundError as error:
                    if split == "test":
                        errors.append(str(error))
        if not groups:
            if missing == "raise":
                raise FileNotFoundError(errors[-1])
            continue
        total = 0
        for pairs in groups.values():
            for s1, s2, _ in pairs:
                total += 2
                for sentence in (s1, s2):
                    if sentence not in seen:
                        seen.add(sentence)
                        sentences.append(sentence)
        counts[task] = {
            "splits": ["test"] if task in STS_YEAR_TASKS else list(groups),
            "sentences": total,
        }
    if not counts:
        raise FileNotFoundError(
            f"No STS set of {names} found in {data_dir}. " + " ".join(errors[:2])
        )
    return sentences, counts

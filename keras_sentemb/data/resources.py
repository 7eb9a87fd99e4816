"""Paths to the data files shipped inside the package.

The package ships a 10,000-sentence Wikipedia sample (the main job's CT
corpus) and the STS Benchmark dev and test sets (SentEval version), each with
its license and attribution, so the README's main job runs from the package
alone.
"""

from pathlib import Path

RESOURCES = Path(__file__).resolve().parents[1] / "resources"


def resource_path(*parts):
    """Path of a packaged resource; raises FileNotFoundError if missing."""
    path = RESOURCES.joinpath(*parts)
    if not path.exists():
        raise FileNotFoundError(f"Packaged resource not found: {path}")
    return path


def bundled_corpus():
    """The bundled 10k-sentence Wikipedia sample (one sentence per line)."""
    return resource_path("wiki", "wiki10k.txt")


def bundled_sts_dir():
    """The bundled SentEval-style STS folder (holds STSBenchmark dev/test)."""
    return resource_path("STS")

"""Scale-aware comparison of exported outputs with the encoder's own.

Both export gates (SavedModel, Hugging Face folders) compare vectors row by
row by their relative error `||got - ref|| / ||ref||` (and report the
cosine): a whitened model's vectors have norms of tens, a normalized
model's of one, and float rounding differs between CPUs, so an absolute
tolerance either fails on correct exports or passes broken ones.

Every gate compares an artifact with `encode()` in the precision the artifact
computes in (`reference_vectors`), never in the process's default: `encode()`
defaults to `"auto"`, bfloat16 on a CPU that computes it natively, while a
float32 LiteRT file or a Hugging Face folder computes float32 on every CPU.
"""

import numpy as np

# Default largest relative error of an export. Float32 rounding between two
# correct pipelines is ~1e-6 relative; a wrong weight, tokenizer or pooling
# is ~1e-1.
DEFAULT_TOLERANCE = 1e-4


def reference_vectors(encoder, sentences, precision="float32", **kwargs):
    """`encoder.encode(sentences, **kwargs)` in `precision`, whatever this process defaults to.

    The reference an export's gate compares its artifact with: `precision`
    is what the artifact computes in, so a gate gives
    the same verdict on a CPU with native bfloat16 (where `encode()`
    defaults to bfloat16) as on one without, and under any
    `KERAS_SENTEMB_PRECISION`.

    Args:
        encoder: a `SentenceEncoder` or `StaticEncoder` (a static encoder
            computes float32 whatever `precision` says).
        sentences: list of str.
        precision: str. `"float32"`, `"bfloat16"` or `"int8"`. Defaults to
            `"float32"`.
        **kwargs: other `encode` arguments (`max_length`, `truncate_dim`).

    Returns:
        float32 numpy array `[n, dim]`.
    """
    return encoder.encode(sentences, precision=precision, show_progress=False, **kwargs)


class ExportVerificationError(ValueError):
    """An export does not reproduce `encode` within tolerance."""


def check_tolerance(tolerance):
    """A positive finite float, or a clear error."""
    if (
        isinstance(tolerance, bool)
        or not isinstance(tolerance, (int, float, np.floating, np.integer))
        or not 0 < float(tolerance) < float("inf")
    ):
        raise ValueError(
            f"`tolerance` must be a positive number (largest relative error), "
            f"received {tolerance!r}."
        )
    return float(tolerance)


def relative_errors(got, ref):
    """Row-wise `||got - ref|| / ||ref||` and cosine of two `[n, d]` arrays.

    A row that is zero on both sides has error 0 and cosine 1; a row that is
    zero on one side only has error 1 (or more) and cosine 0.

    Returns:
        `(errors [n], cosines [n])`, float64.
    """
    got = np.asarray(got, np.float64).reshape(len(got), -1)
    ref = np.asarray(ref, np.float64).reshape(len(ref), -1)
    diff = np.linalg.norm(got - ref, axis=1)
    norm_ref = np.linalg.norm(ref, axis=1)
    norm_got = np.linalg.norm(got, axis=1)
    scale = np.maximum(norm_ref, norm_got)
    tiny = np.finfo(np.float32).tiny
    errors = np.where(scale > tiny, diff / np.maximum(norm_ref, tiny), 0.0)
    both = norm_ref * norm_got
    cosines = np.where(
        scale > tiny, np.sum(got * ref, axis=1) / np.maximum(both, tiny), 1.0
    )
    return errors, cosines


def compare(got, ref, tolerance, what, probes=None):
    """Compare `got` with `ref` row by row; raise when a row is off by more than `tolerance`.

    Args:
        got: array `[n, ...]`. The export's outputs.
        ref: array `[n, ...]`. The encoder's.
        tolerance: float. Largest allowed relative error.
        what: str. Names the export in the error ("The SavedModel").
        probes: list or None. The inputs, to name the worst one.

    Returns:
        dict with `max_rel_diff`, `min_cosine`, `max_abs_diff` and
        `tolerance`.

    Raises:
        ExportVerificationError: shapes differ, an output is not finite, or
            an error exceeds `tolerance`.
    """
    got, ref = np.asarray(got), np.asarray(ref)
    if got.shape != ref.shape or not np.isfinite(got).all():
        raise ExportVerificationError(
            f"{what} returned shape {got.shape} (finite: {bool(np.isfinite(got).all())}); "
            f"expected finite {ref.shape}."
        )
    errors, cosines = relative_errors(got, ref)
    worst = int(errors.argmax()) if len(errors) else 0
    report = {
        "max_rel_diff": float(errors.max(initial=0.0)),
        "min_cosine": float(cosines.min(initial=1.0)),
        "max_abs_diff": float(np.abs(got - ref).max(initial=0.0)),
        "tolerance": float(tolerance),
    }
    if not report["max_rel_diff"] <= tolerance:
        where = "" if probes is None else f": {probes[worst]!r:.60}"
        raise ExportVerificationError(
            f"{what} differs from encode() by a relative error of "
            f"{report['max_rel_diff']:.3g} > tolerance={tolerance:g} (cosine "
            f"{cosines[worst]:.6f}; worst probe #{worst}{where})."
        )
    return report

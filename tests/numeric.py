"""Scale-free comparisons of vectors, for checks that hold on any CPU.

Float32 results differ in their last bits between CPUs (AVX2 and AVX-512
kernels sum in different orders; oneDNN picks different kernels), so a bound
on an absolute difference holds on one machine and fails on another whenever
the test does not control the quantity's scale. These helpers compare each
vector by its direction (cosine) and by its error relative to its own length.
"""

import numpy as np


def _rows(x):
    x = np.asarray(x, np.float64)
    return x.reshape(-1, x.shape[-1]) if x.ndim > 1 else x.reshape(1, -1)


def relative_errors(actual, expected):
    """`||a_i - e_i|| / ||e_i||` for each vector (last axis) of the two arrays.

    A zero expected vector gives the length of the actual one relative to the
    largest expected vector (0 when both are zero).
    """
    a, e = _rows(actual), _rows(expected)
    if a.shape != e.shape:
        raise AssertionError(f"shapes differ: {np.shape(actual)} vs {np.shape(expected)}")
    norms = np.linalg.norm(e, axis=1)
    largest = float(norms.max()) if norms.size else 0.0
    scale = np.where(norms > 0, norms, max(largest, np.finfo(np.float64).tiny))
    return np.linalg.norm(a - e, axis=1) / scale


def cosines(actual, expected):
    """Cosine of each pair of vectors (last axis); 1 where both are zero."""
    a, e = _rows(actual), _rows(expected)
    na, ne = np.linalg.norm(a, axis=1), np.linalg.norm(e, axis=1)
    both_zero = (na == 0) & (ne == 0)
    denom = np.where(both_zero, 1.0, na * ne)
    return np.where(both_zero, 1.0, np.sum(a * e, axis=1) / np.where(denom > 0, denom, 1.0))


def assert_close_vectors(actual, expected, cos=0.99999, rtol=1e-5, err_msg=""):
    """Assert each vector (last axis) of `actual` matches `expected` in direction and length.

    Every pair must have cosine >= `cos` and `||a - e|| <= rtol * ||e||`:
    both are independent of the vectors' scale, so the bound means the same
    for unit-length embeddings, raw hidden states or weight matrices.
    """
    rel = relative_errors(actual, expected)
    cs = cosines(actual, expected)
    if rel.size == 0:  # no vectors: only the shapes had to agree
        return
    worst = int(np.argmax(rel))
    assert rel.max() <= rtol and cs.min() >= cos, (
        f"{err_msg} worst relative error {rel.max():.3g} (row {worst}, bound {rtol:g}); "
        f"lowest cosine {cs.min():.9f} (bound {cos})"
    )


def assert_moved_alike(start, one, other, rtol, min_moved=0.0, err_msg=""):
    """Two runs from `start` ended alike, relative to how far they moved.

    `||one - other|| <= rtol * ||one - start||` over all arrays together (the
    summation order of a reduction shows in the last bits, and an optimizer
    step amplifies it to the step's size, whatever the gradient's scale);
    `||one - start|| > min_moved * ||start||` keeps the check from passing
    because nothing moved.
    """
    flat = lambda xs: np.concatenate([np.asarray(x, np.float64).ravel() for x in xs])  # noqa: E731
    s, a, b = flat(start), flat(one), flat(other)
    moved, drift = np.linalg.norm(a - s), np.linalg.norm(a - b)
    assert moved > min_moved * np.linalg.norm(s), f"{err_msg} the weights hardly moved: {moved:.3g}"
    assert drift <= rtol * moved, (
        f"{err_msg} the runs differ by {drift:.3g}, {drift / moved:.3g} of how far they moved "
        f"({moved:.3g}; bound {rtol:g})"
    )


def default_precision_bounds():
    """`{"rtol": ..., "cos": ...}` for two `encode()` calls in the default precision through
    different graphs (a folder loaded by the command line, an encoder built in Python).

    Float32's where `"auto"` computes float32 on this host; bfloat16's rounding where it
    computes bfloat16 (two bfloat16 graphs may pick different kernels for their shapes).
    """
    from keras_sentemb.kernels.precision import resolve_encode_precision

    if resolve_encode_precision(None) == "float32":
        return {"rtol": 1e-5, "cos": 0.99999}
    return {"rtol": 2e-2, "cos": 0.9999}

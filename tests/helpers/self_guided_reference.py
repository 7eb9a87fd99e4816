"""Float64 loop references of the self-guided losses (SG, SG-OPT and the paper's ablations)."""

import numpy as np

TAU = 0.1


def cosine(a, b):
    """The cosine of two vectors, in float64."""
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    return a @ b / (np.linalg.norm(a) * np.linalg.norm(b))


def phi(a, b, tau=TAU):
    """`exp(cos(a, b) / tau)`."""
    return np.exp(cosine(a, b) / tau)


def ref_base(c, h, tau=TAU):
    """L_base (SG): NT-Xent on the [CLS] vectors `c` and the views `h`."""
    x = list(c) + list(h)
    b = len(c)
    total = 0.0
    for m in range(2 * b):
        pos = x[(m + b) % (2 * b)]
        den = sum(phi(x[m], x[k], tau) for k in range(2 * b) if k != m)
        total += -np.log(phi(x[m], pos, tau) / den)
    return total / (2 * b)


def ref_opt1(c, h, tau=TAU):
    """L_opt1: only the [CLS] vectors are anchors; negatives are c_j and h_j."""
    b = len(c)
    total = 0.0
    for i in range(b):
        num = phi(c[i], h[i], tau)
        den = num + sum(
            phi(c[i], c[j], tau) + phi(c[i], h[j], tau) for j in range(b) if j != i
        )
        total += -np.log(num / den)
    return total / b


def ref_opt2(c, h, tau=TAU):
    """L_opt2: only the [CLS] vectors are anchors; negatives are h_j only."""
    b = len(c)
    total = 0.0
    for i in range(b):
        num = phi(c[i], h[i], tau)
        den = sum(phi(c[i], h[j], tau) for j in range(b))
        total += -np.log(num / den)
    return total / b


def ref_opt3(c, hv, tau=TAU):
    """L_opt3 (SG-OPT): every view `hv[i, k]` is a positive of `c[i]`, other rows' views negatives."""
    b, v = hv.shape[:2]
    total = 0.0
    for i in range(b):
        for k in range(v):
            num = phi(c[i], hv[i, k], tau)
            den = num + sum(
                phi(c[i], hv[m, n], tau) for m in range(b) if m != i for n in range(v)
            )
            total += -np.log(num / den)
    return total / (b * v)

"""Argument checks shared by every public entry point.

Each function returns the value in canonical form or raises a `ValueError`
that names the argument, says what was received and what is expected. The
`fit_*` functions, trainers and the command line all go through these, so a
bad value fails before any model is loaded or any step is trained.
"""

import math
import numbers


# The largest share of a streamed source's rows that training may skip (`max_skipped`).
DEFAULT_MAX_SKIPPED = 0.01


def _is_real(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def positive_int(value, name):
    """`value` as an int >= 1."""
    if not _is_real(value) or int(value) != value or value < 1:
        raise ValueError(f"`{name}` must be a positive int. Received: {name}={value!r}.")
    return int(value)


def optional_positive_int(value, name):
    """None, or `value` as an int >= 1."""
    return None if value is None else positive_int(value, name)


def non_negative_int(value, name):
    """`value` as an int >= 0."""
    if not _is_real(value) or int(value) != value or value < 0:
        raise ValueError(f"`{name}` must be an int >= 0. Received: {name}={value!r}.")
    return int(value)


def positive_float(value, name):
    """`value` as a finite float > 0."""
    if not _is_real(value) or not math.isfinite(float(value)) or not value > 0:
        raise ValueError(
            f"`{name}` must be a finite number > 0. Received: {name}={value!r}."
        )
    return float(value)


def optional_positive_float(value, name):
    """None, or `value` as a finite float > 0."""
    return None if value is None else positive_float(value, name)


def non_negative_float(value, name):
    """`value` as a finite float >= 0."""
    if not _is_real(value) or not math.isfinite(float(value)) or value < 0:
        raise ValueError(
            f"`{name}` must be a finite number >= 0. Received: {name}={value!r}."
        )
    return float(value)


def fraction(value, name, closed_top=False):
    """`value` as a float in [0, 1) (or [0, 1] with `closed_top`)."""
    ok = _is_real(value) and 0.0 <= value and (value <= 1.0 if closed_top else value < 1.0)
    if not ok:
        top = "1]" if closed_top else "1)"
        raise ValueError(f"`{name}` must be a number in [0, {top}. Received: {name}={value!r}.")
    return float(value)


def choice(value, name, choices):
    """`value` if it is one of `choices`."""
    if value not in choices:
        raise ValueError(
            f"`{name}` must be one of {list(choices)}. Received: {name}={value!r}."
        )
    return value

"""BERT-whitening's settings, declared once: its options.

`fit_whitening`'s signature and docstring, `keras-sentemb train whitening`'s flags
and help and the docs' option tables are read from here.
"""

import dataclasses
import typing

from keras_sentemb import validation
from keras_sentemb.methods.options import MethodConfig
from keras_sentemb.methods.options import option


def parse_dims(dim):
    """`dim` -> list of candidate output sizes (None = every direction of non-zero variance).

    Accepts None, an int, a list/tuple of ints (or None), or a
    comma-separated string such as `"128,256,all"` (`all`/`none` = None).
    """
    if isinstance(dim, str):
        dim = [
            None if part.strip().lower() in ("all", "none", "") else part.strip()
            for part in dim.split(",")
        ]
        try:
            dim = [None if d is None else int(d) for d in dim]
        except ValueError:
            raise ValueError(
                f"`dim` must be an int, None or a comma-separated list of ints; received {dim!r}."
            ) from None
    dims = list(dim) if isinstance(dim, (list, tuple)) else [dim]
    if not dims:
        raise ValueError("`dim` is an empty list.")
    out = []
    for d in dims:
        d = None if d is None else validation.positive_int(d, "dim")
        if d not in out:
            out.append(d)
    return out


@dataclasses.dataclass(frozen=True)
class WhiteningConfig(MethodConfig):
    """BERT-whitening's options."""

    dim: typing.Union[int, str, typing.Tuple[typing.Optional[int], ...], None] = option(
        None, "Output size `k` (`None`: every direction of non-zero variance, `d - 1` for "
        "poolings of one layer, see `whitening_weights`); several (a list, or a "
        "comma-separated string such as `\"128,256,all\"`) are candidates, the best on `dev` "
        "kept.", check=parse_dims)

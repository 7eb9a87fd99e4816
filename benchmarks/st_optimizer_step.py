"""torch side of optimizer_step.py: milliseconds per optimizer update (run in the ST venv).

    stref/bin/python benchmarks/st_optimizer_step.py --shapes shapes.json --threads 1

Builds float32 parameters of the given shapes with random gradients and times
`optimizer.step()` of torch's RMSprop and AdamW (their default `foreach`
multi-tensor implementations, what sentence-transformers trains with).
Prints one JSON line `{"impl": "torch", "rmsprop_ms": ..., "adamw_ms": ...}`.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from st_gemm import best_time  # noqa: E402


def best_ms(fn):
    """Best milliseconds per call of `fn` (3 runs of 5 calls, after 2 warm-up calls)."""
    return round(best_time(fn, repeats=3, calls=5) * 1000, 1)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", required=True, help="JSON file: a list of shapes")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    with open(args.shapes) as f:
        shapes = json.load(f)
    params = [torch.nn.Parameter(torch.randn(*s) * 0.02) for s in shapes]
    for param in params:
        param.grad = torch.randn_like(param) * 1e-3
    out = {"impl": "torch", "torch": torch.__version__, "threads": args.threads}
    for name, make in (("rmsprop", lambda: torch.optim.RMSprop(params, lr=1e-5)),
                       ("adamw", lambda: torch.optim.AdamW(params, lr=1e-5, weight_decay=0.01))):
        opt = make()
        out[f"{name}_ms"] = best_ms(opt.step)
    print(json.dumps(out))


if __name__ == "__main__":
    main()

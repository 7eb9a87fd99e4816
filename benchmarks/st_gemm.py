"""torch side of gemm_backward.py: GFLOP/s of a Dense layer's three products (run in the ST venv).

    stref/bin/python benchmarks/st_gemm.py --rows 2400 --threads 1

Prints one JSON line `{"impl": "torch", "<K>x<N> fwd|dX|dW": GFLOP/s, ...}`.
"""

import argparse
import json
import time

SHAPES = ((384, 1536), (1536, 384), (384, 384))


def best_time(fn, repeats=3, calls=20):
    fn()
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=2400)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    out = {"impl": "torch", "torch": torch.__version__, "threads": args.threads}
    with torch.no_grad():
        for k, n in SHAPES:
            x, w, dy = torch.randn(args.rows, k), torch.randn(k, n), torch.randn(args.rows, n)
            gflop = 2 * args.rows * k * n / 1e9
            out[f"{k}x{n} fwd"] = round(gflop / best_time(lambda: x @ w), 1)
            out[f"{k}x{n} dX"] = round(gflop / best_time(lambda: dy @ w.t()), 1)
            out[f"{k}x{n} dW"] = round(gflop / best_time(lambda: x.t() @ dy), 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()

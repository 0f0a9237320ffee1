"""Split estimator benchmark: memory at 10^6 and 10^7 observations (must be equal) and split accuracy.

Observations are (key, size) pairs of fixed-length keys `k%010d` with
heavy-tailed sizes (Pareto, alpha 1.5, up to 1 GB), fed in a scrambled order
and in key order (the worst order for deterministic sketches). Accuracy is the
true share of bytes before the estimated split, against the best split of all
observed keys; the target is the estimator's stated bound, 2/sqrt(capacity)
beyond the best split's distance from one half.

    .venv/bin/python bench/split_estimator.py [--capacity 4096] [--sizes 1000000 10000000] [--seeds 3]
"""

from __future__ import annotations

import argparse
import time

from _common import machine

from partbuild.orchestrator.connectors.split_estimator import SplitEstimator, error_bound
from partbuild.orchestrator.connectors.toxic import ItemKey

STRIDE = 7919  # prime and coprime to powers of ten: j = i * STRIDE mod n visits every key once, scrambled


def size_of(j: int) -> int:
    """A heavy-tailed size for key j, the same every run."""
    u = (((j + 1) * 2654435761) % (1 << 32) + 1) / (1 << 32)  # in (0, 1]
    return min(int(u ** (-1 / 1.5)), 10**9)


def run(n: int, capacity: int, seed: int, scrambled: bool) -> dict[str, float]:
    estimator = SplitEstimator(capacity, seed=seed)
    started = time.perf_counter()
    for i in range(n):
        j = (i * STRIDE) % n if scrambled else i
        estimator.observe(ItemKey(b"k%010d" % j), size_of(j))
    elapsed = time.perf_counter() - started
    split = estimator.split_point()
    assert split is not None
    split_j = int(split.raw_bytes()[1:])
    total, before, share, best = estimator.total_bytes, 0, 0.0, 1.0
    for j in range(n):  # one pass in key order: the share before the split and the best achievable
        if j == split_j:
            share = before / total
        if j > 0 and abs(before / total - 0.5) < abs(best - 0.5):
            best = before / total
        before += size_of(j)
    return {
        "observations_per_s": n / elapsed,
        "retained": estimator.retained,
        "deep_size": estimator.deep_size(),
        "share": share,
        "best": best,
        "excess": abs(share - 0.5) - abs(best - 0.5),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--capacity", type=int, default=4096)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--seeds", type=int, default=3, help="seeds per size at the smallest size (1 at larger ones)")
    args = parser.parse_args()
    print(f"machine: {machine()}")
    print(f"capacity {args.capacity}, target: excess <= {error_bound(args.capacity):.4f} (2/sqrt(capacity))")
    memory = {}
    worst = 0.0
    for n in args.sizes:
        for order in ("scrambled", "key order"):
            for seed in range(args.seeds if n == min(args.sizes) else 1):
                r = run(n, args.capacity, seed, order == "scrambled")
                memory.setdefault(n, set()).add((r["retained"], r["deep_size"]))
                worst = max(worst, r["excess"])
                print(
                    f"n={n:>10,} {order:>9} seed={seed}: retained {r['retained']:,} entries, "
                    f"{r['deep_size']:,} bytes; share before split {r['share']:.4f} "
                    f"(best {r['best']:.4f}, excess {r['excess']:+.4f}); {r['observations_per_s']:,.0f} obs/s"
                )
    shapes = {shape for shapes in memory.values() for shape in shapes}
    print(f"memory equal at every size: {len(shapes) == 1} {sorted(shapes)}")
    target = error_bound(args.capacity)
    print(f"worst excess {worst:.4f}, target {target:.4f}: {'met' if worst <= target else 'MISSED'}")
    if len(shapes) != 1:
        raise SystemExit("memory differs between sizes")


if __name__ == "__main__":
    main()

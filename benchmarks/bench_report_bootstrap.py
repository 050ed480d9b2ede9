"""The report's bootstrap: resampling counts + one matrix product (ava.report.bootstrap.replicate_means) against
gathering the scores per replicate (the direct way), side by side in one process on the same data.

    python benchmarks/bench_report_bootstrap.py [--vfms 9] [--n 7000] [--boot 2000] [--repeat 3]

Prints the best of ``--repeat`` wall times of each and their ratio, with the device; both give replicates with
the same draws from one seed, so the check at the end finds equal 95% intervals.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np
import results  # benchmarks/, beside this script

from ava.report import bootstrap as bs


def gather(scores: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    v, n = scores.shape
    out = np.empty((v, n_boot))
    chunk = max(1, (1 << 20) // (n * v))
    for start in range(0, n_boot, chunk):
        idx = rng.integers(0, n, size=(min(chunk, n_boot - start), n))
        out[:, start : start + len(idx)] = scores[:, idx].mean(-1)
    return out


def best_of(fn, repeat: int) -> tuple[float, np.ndarray]:
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return min(times), result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vfms", type=int, default=9)
    p.add_argument("--n", type=int, default=7000)
    p.add_argument("--boot", type=int, default=2000)
    p.add_argument("--repeat", type=int, default=3)
    results.json_option(p)
    a = p.parse_args()
    scores = (np.random.default_rng(0).random((a.vfms, a.n)) < 0.6).astype(float)
    t_gather, r_gather = best_of(lambda: gather(scores, a.boot, np.random.default_rng(1)), a.repeat)
    t_counts, r_counts = best_of(lambda: bs.replicate_means(scores, a.boot, np.random.default_rng(1)), a.repeat)
    print(
        f"device: CPU {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, numpy {np.__version__}"
    )
    print(f"{a.vfms} VFMs x {a.n} samples x {a.boot} replicates, best of {a.repeat}")
    print(f"gather per replicate : {t_gather:8.3f} s")
    print(f"counts + matmul (ava): {t_counts:8.3f} s   ({t_gather / t_counts:.1f}x faster)")
    width = np.abs(bs.interval(r_gather) - bs.interval(r_counts)).max()
    print(f"largest difference between the two 95% interval ends: {width:.2g} (same draws, so equal up to rounding)")
    what = f"{a.vfms} VFMs x {a.n} samples x {a.boot} replicates"
    threads = f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}"
    figures = [
        results.figure(f"replicate means, {what}", round(t_counts, 3), "s", note=f"best of {a.repeat}, {threads}"),
        results.figure("against gathering each replicate's scores", round(t_gather / t_counts, 1), "x faster"),
    ]
    row = {"gather_s": round(t_gather, 3), "counts_s": round(t_counts, 3), "interval_difference": width}
    results.write(a.json, "bench_report_bootstrap", figures, [row], row)


if __name__ == "__main__":
    main()

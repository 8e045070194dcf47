#!/usr/bin/env python3
"""Throughput of the Python bindings against the same C++ calls, and against numpy, in one run.

On N f16 pairs (default 2^25) of two kinds of data (DATA_KINDS: b = a moved by -3..3 representable
steps everywhere, and b = a with every seventh element one step up, numpy.nextafter, the rest
equal), for ulp_diff and error_stats:
  python  fusebench.ulp_diff(a, b) / fusebench.error_stats(a, b), timed from Python (operand
          checks, the binding, the result objects and the returned distance array included);
  cpp     the same toolkit calls (ulp_diff + summarize; error_stats) on the same memory, timed
          inside the extension by fusebench._core.time_cpp (steady_clock around the C++ call);
  numpy   numpy.testing.assert_array_max_ulp(a, b, maxulp=1000) on the same arrays (ulp_diff only).
Python and C++ runs alternate; each figure is the median of --repeats runs after one warm-up.
Writes a JSON object (figures and the two ratios the issue asks for) to --out and to stdout. A
benchmark, not a test: the ratios are reported, never asserted.

Usage: python bench_python.py [--log2n 25] [--repeats 5] [--out bench-python.json]
"""

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time

import fusebench
import numpy as np
from fusebench import _core


def make_pairs(kind, n, seed):
    """a: f16 normals (counter-based Philox stream); b by kind, see DATA_KINDS."""
    rng = np.random.Generator(np.random.Philox(seed))
    a = rng.standard_normal(n, dtype=np.float32).astype(np.float16)
    if kind == "every7th-one-step":
        b = a.copy()
        b[::7] = np.nextafter(b[::7], np.float16(np.inf))
        return a, b
    steps = rng.integers(-3, 4, n, dtype=np.int16)
    # Steps move the magnitude bits; near zero only upwards, so that no step crosses the sign
    # (a -3 step from +0 would land on a NaN pattern). Normals stay far below the f16 infinity.
    magnitude = a.view(np.int16) & np.int16(0x7FFF)
    steps = np.where(magnitude < 3, np.abs(steps), steps).astype(np.int16)
    b = (a.view(np.int16) + steps).view(np.float16)
    return a, b


# Every element moved (a dense histogram of small distances), and the sparse case of a
# regression test (most elements equal, a few one step apart).
DATA_KINDS = ("steps-3..3", "every7th-one-step")


def timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(op, a, b, repeats):
    python_call = {"ulp_diff": lambda: fusebench.ulp_diff(a, b), "error_stats": lambda: fusebench.error_stats(a, b)}[op]
    python_call()  # warm-up: first-touch of the toolkit's buffers, as for the C++ side
    _core.time_cpp(op, a, b, False, False, 1)
    python_seconds, cpp_seconds = [], []
    for _ in range(repeats):
        python_seconds.append(timed(python_call))
        cpp_seconds.append(_core.time_cpp(op, a, b, False, False, 1)[0])
    return python_seconds, cpp_seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--log2n", type=int, default=25)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--numpy-repeats", type=int, default=2)
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--out", default="bench-python.json")
    args = parser.parse_args()
    n = 1 << args.log2n
    print(f"bench_python: {n} f16 pairs, {args.repeats} repeats", file=sys.stderr)
    result = {
        "n": n,
        "dtype": "f16",
        "repeats": args.repeats,
        "seed": args.seed,
        "context": {
            "python": sys.version.split()[0],
            "numpy": np.__version__,
            "fusebench": fusebench.__version__,
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
        },
        "data": {},
    }
    for kind in DATA_KINDS:
        a, b = make_pairs(kind, n, args.seed)
        ops = result["data"][kind] = {}
        for op in ("ulp_diff", "error_stats"):
            print(f"bench_python: {kind}: {op}", file=sys.stderr)
            python_seconds, cpp_seconds = measure(op, a, b, args.repeats)
            py, cpp = statistics.median(python_seconds), statistics.median(cpp_seconds)
            ops[op] = {
                "python_seconds": python_seconds,
                "cpp_seconds": cpp_seconds,
                "python_pairs_per_second": n / py,
                "cpp_pairs_per_second": n / cpp,
                "python_over_cpp_throughput": cpp / py,
                "target_python_over_cpp": 0.8,
                "meets_target": cpp / py >= 0.8,
            }
        print(f"bench_python: {kind}: numpy.testing.assert_array_max_ulp", file=sys.stderr)
        numpy_seconds = [
            timed(lambda a=a, b=b: np.testing.assert_array_max_ulp(a, b, maxulp=1000))
            for _ in range(args.numpy_repeats)
        ]
        ulp = ops["ulp_diff"]
        numpy_median = statistics.median(numpy_seconds)
        ulp["numpy_assert_array_max_ulp_seconds"] = numpy_seconds
        ulp["python_over_numpy_throughput"] = numpy_median / statistics.median(ulp["python_seconds"])
        ulp["target_python_over_numpy"] = 20.0
        ulp["meets_numpy_target"] = ulp["python_over_numpy_throughput"] >= 20.0
        # Same answer, or the comparison means nothing.
        assert fusebench.ulp_diff(a, b).max == int(np.max(np.testing.assert_array_max_ulp(a, b, maxulp=1000)))
        del a, b

    text = json.dumps(result, indent=1)
    directory = os.path.dirname(os.path.abspath(args.out))
    fd, temporary = tempfile.mkstemp(dir=directory, prefix=".bench-python-")
    with os.fdopen(fd, "w") as out:
        out.write(text + "\n")
    os.replace(temporary, args.out)
    print(text)


if __name__ == "__main__":
    main()

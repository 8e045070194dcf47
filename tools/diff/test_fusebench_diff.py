"""Output test of fusebench-diff: JSON fields and values on dumps with known differences, exit
codes on bad input, and that numpy reads the dumps (f16 directly, bf16 through its documented
one-field record layout)."""

import argparse
import json
import pathlib
import subprocess
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--diff", required=True)
parser.add_argument("--fixtures", required=True)
parser.add_argument("--work", required=True)
args = parser.parse_args()
work = pathlib.Path(args.work)
subprocess.run([args.fixtures, str(work)], check=True)
failures = []


def check(condition, what):
    if not condition:
        failures.append(what)


def run(*argv):
    return subprocess.run([args.diff, *map(str, argv)], capture_output=True, text=True)


# ---- A vs B and both against the fp64 reference
result = run(work / "a.npy", work / "b.npy", "--ref", work / "ref.npy", "--json", "--bins", "4")
check(result.returncode == 0, f"compare exit {result.returncode}: {result.stderr}")
out = json.loads(result.stdout)
for key in ["bit_equal", "n", "mismatches", "ulp_diff", "abs", "rel", "nan", "inf", "against_ref"]:
    check(key in out, f"missing key {key}")
check("ulp" not in out and "ulp_error" not in out, "A vs B carries no fractional ULP error (that needs a reference)")
for block in ["ulp_diff", "abs", "rel"]:
    for stat in ["max", "mean", "p50", "p99"]:
        check(stat in out[block], f"missing {block}.{stat}")
check(out["bit_equal"] is False, "bit_equal should be false")
check(out["n"] == 2048, f"n = {out['n']}")
check(out["mismatches"] == 2, f"mismatches = {out['mismatches']}")
check(out["first_mismatch_indices"] == [5, 7], f"first indices {out['first_mismatch_indices']}")
check(out["nan"] == {"a": 0, "b": 1}, f"nan counts {out['nan']}")
hist = out["ulp_diff"]["hist"]
counts = {b["ulp"]: b["count"] for b in hist["bins"]}
check(counts == {0: 2046, 1: 0, 2: 0, 3: 1}, f"hist bins {counts}")
check(hist["at_least"] == {"ulp": 4, "count": 0}, f"overflow bin {hist['at_least']}")
check(hist["nan_pairs"] == 1, f"nan pairs {hist['nan_pairs']}")
check(out["ulp_diff"]["max"] == 3 and out["ulp_diff"]["max_index"] == 5, f"ulp_diff max {out['ulp_diff']}")
a_ref = out["against_ref"]["a"]
check(a_ref["ulp_error"]["max"] <= 0.5, f"a is the correctly rounded ref, ulp_error max {a_ref['ulp_error']['max']}")
check(a_ref["ulp_diff"]["max"] == 0, f"a is the correctly rounded ref, ulp_diff max {a_ref['ulp_diff']['max']}")
check(a_ref["ulp_diff"]["hist"]["bins"][0]["count"] == 2048, "a rounds ref exactly everywhere")
check(out["against_ref"]["b"]["mismatches"] == 1, "b has one NaN where ref is finite")

# ---- identical dumps, text output
result = run(work / "a.npy", work / "a.npy")
check(result.returncode == 0 and "bit_equal: yes" in result.stdout, f"self compare: {result.stdout}")

# ---- bad input: exit 2 and a message naming the problem
bad_cases = [
    ((work / "a.npy", work / "missing.npy"), "missing.npy: no such file"),
    ((work / "a.npy", work), f"{work}: is a directory"),
    ((work / "a.npy", work / "short.npy"), "shape mismatch"),
    ((work / "a.npy", work / "truncated.npy"), "truncated .npy data"),
    ((work / "ints.npy", work / "a.npy"), "must be floating"),
    ((work / "a.npy", work / "b.npy", "--ref", work / "short.npy"), "shape mismatch"),
    ((work / "a.npy", work / "b.npy", "--bins", "0"), "bins"),
    ((work / "a.npy",), "B is required"),
]
for argv, fragment in bad_cases:
    result = run(*argv)
    check(result.returncode == 2, f"{argv}: exit {result.returncode}, expected 2")
    check(fragment in result.stderr + result.stdout, f"{argv}: message lacks '{fragment}': {result.stderr}")

# ---- a header that promises more than the file holds: an error naming the file, no allocation
huge = work / "huge_shape.npy"
header = b"{'descr': '<f2', 'fortran_order': False, 'shape': (99999999999999999,), }"
header += b" " * (128 - 10 - len(header) - 1) + b"\n"
huge.write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header)
check(huge.stat().st_size == 128, "the huge-shape file is 128 bytes")
result = run(work / "a.npy", huge)
check(result.returncode == 2, f"huge shape: exit {result.returncode}, expected 2 ({result.stderr})")
check(str(huge) in result.stderr and "truncated .npy data" in result.stderr, f"huge shape message: {result.stderr}")

# ---- numpy reads what we write
try:
    import numpy as np
except ImportError:
    print("SKIPPED numpy interoperability: numpy is not installed for", sys.executable)
else:
    # A pair that straddles a binade: 3 representable steps apart, 5 spacings of B's binade. A
    # against B reports the integer distance the histogram bins, as numpy's nulp_diff does.
    np.save(work / "straddle_a.npy", np.array([0xA002], dtype=np.uint16).view(np.float16))
    np.save(work / "straddle_b.npy", np.array([0x9FFF], dtype=np.uint16).view(np.float16))
    result = run(work / "straddle_a.npy", work / "straddle_b.npy", "--json")
    out = json.loads(result.stdout)
    from numpy.testing._private.utils import nulp_diff  # numpy's own integer ULP distance (not exported)

    nulp = int(nulp_diff(np.load(work / "straddle_a.npy"), np.load(work / "straddle_b.npy")).ravel()[0])
    hist = {b["ulp"]: b["count"] for b in out["ulp_diff"]["hist"]["bins"] if b["count"]}
    check(nulp == 3, f"numpy's nulp_diff says {nulp}")
    check(out["ulp_diff"]["max"] == nulp and out["ulp_diff"]["mean"] == nulp, f"straddle: ulp_diff {out['ulp_diff']}")
    check(hist == {nulp: 1}, f"straddle: histogram {hist} disagrees with max {out['ulp_diff']['max']}")
    # The largest finite f16 against +inf: one step apart, as ulp_diff defines; the non-finite
    # pair is still counted on its own.
    np.save(work / "max_f16.npy", np.array([65504.0], dtype=np.float16))
    np.save(work / "inf_f16.npy", np.array([np.inf], dtype=np.float16))
    result = run(work / "max_f16.npy", work / "inf_f16.npy", "--json")
    out = json.loads(result.stdout)
    check(out["ulp_diff"]["max"] == 1, f"65504 vs inf: ulp_diff max {out['ulp_diff']['max']}")
    check(out["nonfinite_mismatches"] == 1 and out["inf"] == {"a": 0, "b": 1}, f"65504 vs inf counts: {out}")

    a = np.load(work / "a.npy")
    ref = np.load(work / "ref.npy")
    check(a.dtype == np.float16 and a.shape == (64, 32), f"numpy sees {a.dtype} {a.shape}")
    check(np.array_equal(a, ref.astype(np.float16)), "numpy's own fp64->fp16 rounding agrees with ours")
    bf = np.load(work / "a_bf16.npy")
    bits = bf["bf16"]
    check(bits.dtype == np.uint16, f"bf16 record field is {bits.dtype}")
    as_f32 = (bits.astype(np.uint32) << 16).view(np.float32)
    check(np.all(np.abs(as_f32 - ref) <= np.abs(ref) * 2.0**-8 + 1e-40), "bf16 values decode within half a bf16 ULP")

for f in failures:
    print("FAIL:", f)
print(f"fusebench-diff output test: {len(failures)} failures")
sys.exit(1 if failures else 0)

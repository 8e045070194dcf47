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
for key in ["bit_equal", "n", "mismatches", "ulp", "abs", "rel", "nan", "inf", "against_ref"]:
    check(key in out, f"missing key {key}")
for block in ["ulp", "abs", "rel"]:
    for stat in ["max", "mean", "p50", "p99"]:
        check(stat in out[block], f"missing {block}.{stat}")
check(out["bit_equal"] is False, "bit_equal should be false")
check(out["n"] == 2048, f"n = {out['n']}")
check(out["mismatches"] == 2, f"mismatches = {out['mismatches']}")
check(out["first_mismatch_indices"] == [5, 7], f"first indices {out['first_mismatch_indices']}")
check(out["nan"] == {"y": 0, "ref": 1}, f"nan counts {out['nan']}")
hist = out["ulp"]["hist"]
counts = {b["ulp"]: b["count"] for b in hist["bins"]}
check(counts == {0: 2046, 1: 0, 2: 0, 3: 1}, f"hist bins {counts}")
check(hist["at_least"] == {"ulp": 4, "count": 0}, f"overflow bin {hist['at_least']}")
check(hist["nan_pairs"] == 1, f"nan pairs {hist['nan_pairs']}")
check(out["ulp"]["max_index"] == 5, f"ulp max index {out['ulp']['max_index']}")
a_ref = out["against_ref"]["a"]
check(a_ref["ulp"]["max"] <= 0.5, f"a is the correctly rounded ref, ulp max {a_ref['ulp']['max']}")
check(a_ref["ulp"]["hist"]["bins"][0]["count"] == 2048, "a rounds ref exactly everywhere")
check(out["against_ref"]["b"]["mismatches"] == 1, "b has one NaN where ref is finite")

# ---- identical dumps, text output
result = run(work / "a.npy", work / "a.npy")
check(result.returncode == 0 and "bit_equal: yes" in result.stdout, f"self compare: {result.stdout}")

# ---- bad input: exit 2 and a message naming the problem
bad_cases = [
    ((work / "a.npy", work / "missing.npy"), "missing.npy: cannot open"),
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

# ---- numpy reads what we write
try:
    import numpy as np
except ImportError:
    print("SKIPPED numpy interoperability: numpy is not installed for", sys.executable)
else:
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

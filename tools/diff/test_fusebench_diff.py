"""Output test of fusebench-diff: JSON fields and values on dumps with known differences, exit
codes on bad input, and that numpy reads the dumps (f16 directly, bf16 through its documented
one-field record layout). The binaries are FUSEBENCH_DIFF and FUSEBENCH_DIFF_FIXTURES (ctest names
them; by default build/release/bin's fusebench-diff and make_diff_fixtures); skipped where they are
not built."""

import json
import os
import pathlib
import subprocess

import pytest

from tools.tests.built import BIN

DIFF = os.environ.get("FUSEBENCH_DIFF") or str(BIN / "fusebench-diff")
MAKE_FIXTURES = os.environ.get("FUSEBENCH_DIFF_FIXTURES") or str(BIN / "make_diff_fixtures")
pytestmark = pytest.mark.skipif(
    not (pathlib.Path(DIFF).is_file() and pathlib.Path(MAKE_FIXTURES).is_file()),
    reason=f"fusebench-diff or make_diff_fixtures not built ({DIFF}, {MAKE_FIXTURES})",
)


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> pathlib.Path:
    """The dumps make_diff_fixtures writes: a, b (2 mismatches, one NaN), their fp64 reference, bad files."""
    root = pathlib.Path(os.environ.get("FUSEBENCH_TEST_WORK") or tmp_path_factory.mktemp("diff-test"))
    subprocess.run([MAKE_FIXTURES, str(root)], check=True)
    return root


def run(*argv):
    return subprocess.run([DIFF, *map(str, argv)], capture_output=True, text=True)


def test_a_vs_b_and_both_against_the_reference(work):
    """A vs B and both against the fp64 reference."""
    result = run(work / "a.npy", work / "b.npy", "--ref", work / "ref.npy", "--json", "--bins", "4")
    assert result.returncode == 0, f"compare exit {result.returncode}: {result.stderr}"
    out = json.loads(result.stdout)
    for key in ["bit_equal", "n", "mismatches", "ulp_diff", "abs", "rel", "nan", "inf", "against_ref"]:
        assert key in out, f"missing key {key}"
    assert "ulp" not in out and "ulp_error" not in out, (
        "A vs B carries no fractional ULP error (that needs a reference)"
    )
    for block in ["ulp_diff", "abs", "rel"]:
        for stat in ["max", "mean", "p50", "p99"]:
            assert stat in out[block], f"missing {block}.{stat}"
    assert out["bit_equal"] is False, "bit_equal should be false"
    assert out["n"] == 2048, f"n = {out['n']}"
    assert out["mismatches"] == 2, f"mismatches = {out['mismatches']}"
    assert out["first_mismatch_indices"] == [5, 7], f"first indices {out['first_mismatch_indices']}"
    assert out["nan"] == {"a": 0, "b": 1}, f"nan counts {out['nan']}"
    hist = out["ulp_diff"]["hist"]
    counts = {b["ulp"]: b["count"] for b in hist["bins"]}
    assert counts == {0: 2046, 1: 0, 2: 0, 3: 1}, f"hist bins {counts}"
    assert hist["at_least"] == {"ulp": 4, "count": 0}, f"overflow bin {hist['at_least']}"
    assert hist["nan_pairs"] == 1, f"nan pairs {hist['nan_pairs']}"
    assert out["ulp_diff"]["max"] == 3 and out["ulp_diff"]["max_index"] == 5, f"ulp_diff max {out['ulp_diff']}"
    a_ref = out["against_ref"]["a"]
    assert a_ref["ulp_error"]["max"] <= 0.5, (
        f"a is the correctly rounded ref, ulp_error max {a_ref['ulp_error']['max']}"
    )
    assert a_ref["ulp_diff"]["max"] == 0, f"a is the correctly rounded ref, ulp_diff max {a_ref['ulp_diff']['max']}"
    assert a_ref["ulp_diff"]["hist"]["bins"][0]["count"] == 2048, "a rounds ref exactly everywhere"
    assert out["against_ref"]["b"]["mismatches"] == 1, "b has one NaN where ref is finite"


def test_identical_dumps_text_output(work):
    """Identical dumps, text output."""
    result = run(work / "a.npy", work / "a.npy")
    assert result.returncode == 0 and "bit_equal: yes" in result.stdout, f"self compare: {result.stdout}"


def test_bad_input_exits_2_naming_the_problem(work):
    """Bad input: exit 2 and a message naming the problem."""
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
        assert result.returncode == 2, f"{argv}: exit {result.returncode}, expected 2"
        assert fragment in result.stderr + result.stdout, f"{argv}: message lacks '{fragment}': {result.stderr}"


def test_a_header_promising_more_than_the_file_holds(work):
    """A header that promises more than the file holds: an error naming the file, no allocation."""
    huge = work / "huge_shape.npy"
    header = b"{'descr': '<f2', 'fortran_order': False, 'shape': (99999999999999999,), }"
    header += b" " * (128 - 10 - len(header) - 1) + b"\n"
    huge.write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header)
    assert huge.stat().st_size == 128, "the huge-shape file is 128 bytes"
    result = run(work / "a.npy", huge)
    assert result.returncode == 2, f"huge shape: exit {result.returncode}, expected 2 ({result.stderr})"
    assert str(huge) in result.stderr and "truncated .npy data" in result.stderr, f"huge shape message: {result.stderr}"


def test_numpy_reads_what_fusebench_writes(work):
    """Numpy reads what we write."""
    np = pytest.importorskip("numpy")
    # A pair that straddles a binade: 3 representable steps apart, 5 spacings of B's binade. A
    # against B reports the integer distance the histogram bins, as numpy's nulp_diff does.
    np.save(work / "straddle_a.npy", np.array([0xA002], dtype=np.uint16).view(np.float16))
    np.save(work / "straddle_b.npy", np.array([0x9FFF], dtype=np.uint16).view(np.float16))
    result = run(work / "straddle_a.npy", work / "straddle_b.npy", "--json")
    out = json.loads(result.stdout)
    from numpy.testing._private.utils import nulp_diff  # numpy's own integer ULP distance (not exported)

    nulp = int(nulp_diff(np.load(work / "straddle_a.npy"), np.load(work / "straddle_b.npy")).ravel()[0])
    hist = {b["ulp"]: b["count"] for b in out["ulp_diff"]["hist"]["bins"] if b["count"]}
    assert nulp == 3, f"numpy's nulp_diff says {nulp}"
    assert out["ulp_diff"]["max"] == nulp and out["ulp_diff"]["mean"] == nulp, f"straddle: ulp_diff {out['ulp_diff']}"
    assert hist == {nulp: 1}, f"straddle: histogram {hist} disagrees with max {out['ulp_diff']['max']}"
    # The largest finite f16 against +inf: one step apart, as ulp_diff defines; the non-finite
    # pair is still counted on its own.
    np.save(work / "max_f16.npy", np.array([65504.0], dtype=np.float16))
    np.save(work / "inf_f16.npy", np.array([np.inf], dtype=np.float16))
    result = run(work / "max_f16.npy", work / "inf_f16.npy", "--json")
    out = json.loads(result.stdout)
    assert out["ulp_diff"]["max"] == 1, f"65504 vs inf: ulp_diff max {out['ulp_diff']['max']}"
    assert out["nonfinite_mismatches"] == 1 and out["inf"] == {"a": 0, "b": 1}, f"65504 vs inf counts: {out}"

    a = np.load(work / "a.npy")
    ref = np.load(work / "ref.npy")
    assert a.dtype == np.float16 and a.shape == (64, 32), f"numpy sees {a.dtype} {a.shape}"
    assert np.array_equal(a, ref.astype(np.float16)), "numpy's own fp64->fp16 rounding agrees with ours"
    bf = np.load(work / "a_bf16.npy")
    bits = bf["bf16"]
    assert bits.dtype == np.uint16, f"bf16 record field is {bits.dtype}"
    as_f32 = (bits.astype(np.uint32) << 16).view(np.float32)
    assert np.all(np.abs(as_f32 - ref) <= np.abs(ref) * 2.0**-8 + 1e-40), "bf16 values decode within half a bf16 ULP"

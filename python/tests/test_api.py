"""The package's API against numpy's own arithmetic, on every f16 and bf16 bit pattern. Runs against
the installed wheel (tools/test installs it into a separate virtual environment)."""

import json
import os
import pathlib
import subprocess
import sys

import fusebench
import ml_dtypes
import numpy as np
import oracles
import pytest

ALL16 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
RNG_SEED = 20261201


def as_format(bits, fmt):
    """An array of fmt holding the given uint16 bit patterns (numpy float16, ml_dtypes bfloat16)."""
    return bits.view(np.float16) if fmt == "f16" else bits.view(ml_dtypes.bfloat16)


def partner_patterns(fmt):
    """For every pattern a, a partner b: neighbours at several distances, across zero, across binade
    edges, infinities and NaNs, and a random permutation."""
    rng = np.random.Generator(np.random.Philox(RNG_SEED))
    a = np.concatenate([ALL16] * 6)
    shifts = np.concatenate(
        [
            np.zeros(1 << 16, np.int64),
            np.ones(1 << 16, np.int64),
            np.full(1 << 16, -3, np.int64),
            rng.integers(-40, 41, 1 << 16),
        ]
    )
    b_shifted = ((a[: shifts.size].astype(np.int64) + shifts) & 0xFFFF).astype(np.uint16)
    b_sign = a[(1 << 16) * 4 : (1 << 16) * 5] ^ np.uint16(0x8000)  # same magnitude, other sign
    b_random = rng.permutation(ALL16)
    return a, np.concatenate([b_shifted, b_sign, b_random])


@pytest.mark.parametrize("fmt", ["f16", "bf16"])
def test_ulp_diff_every_pattern(fmt):
    a_bits, b_bits = partner_patterns(fmt)
    result = fusebench.ulp_diff(as_format(a_bits, fmt), as_format(b_bits, fmt), bins=16)
    expected, nan = oracles.ulp_distance(a_bits, b_bits, fmt)
    assert result.distance.dtype == np.uint16 and result.distance.shape == a_bits.shape
    np.testing.assert_array_equal(result.distance[~nan].astype(np.uint64), expected[~nan])
    assert (result.distance[nan] == 0xFFFF).all()
    assert result.nan_pairs == int(nan.sum())
    assert result.compared == int((~nan).sum())
    valid = expected[~nan]
    assert result.max == int(valid.max())
    assert result.max_index == int(np.flatnonzero(~nan & (expected == valid.max()))[0])
    assert result.mean == pytest.approx(float(valid.astype(np.float64).mean()), rel=1e-12)
    assert result.p50 == float(np.percentile(valid, 50))
    assert result.p99 == float(np.percentile(valid, 99))
    counts = np.bincount(np.minimum(valid, 16).astype(np.int64), minlength=17)
    assert result.hist.bins == tuple(int(c) for c in counts[:16])
    assert (result.hist.at_least_ulp, result.hist.at_least_count) == (16, int(counts[16]))
    assert result.first_nan_indices == tuple(int(i) for i in np.flatnonzero(nan)[:16])


def test_ulp_diff_binade_straddle_and_infinity():
    # The pair from issue 12: 3 representable steps apart, 5 spacings of B's binade.
    a = np.array([0xA002, 0x7BFF, 0x0000, 0x8001], np.uint16).view(np.float16)
    b = np.array([0x9FFF, 0x7C00, 0x8000, 0x0001], np.uint16).view(np.float16)
    result = fusebench.ulp_diff(a, b)
    assert result.distance.tolist() == [3, 1, 0, 2]
    assert result.to_dict()["max"] == 3 and result.to_dict()["hist"]["bins"][3]["count"] == 1


@pytest.mark.parametrize("fmt", ["f16", "bf16"])
@pytest.mark.parametrize("nan,signed_zero", [("bitwise", "bitwise"), ("any-nan-equal", "equal")])
def test_bit_equal_every_pattern(fmt, nan, signed_zero):
    a_bits, b_bits = partner_patterns(fmt)
    result = fusebench.bit_equal(as_format(a_bits, fmt), as_format(b_bits, fmt), nan=nan, signed_zero=signed_zero)
    equal = a_bits == b_bits
    if nan == "any-nan-equal":
        equal |= oracles.is_nan_bits(a_bits, fmt) & oracles.is_nan_bits(b_bits, fmt)
    if signed_zero == "equal":
        equal |= ((a_bits & 0x7FFF) == 0) & ((b_bits & 0x7FFF) == 0)
    assert result.n == a_bits.size
    assert result.mismatches == int((~equal).sum())
    assert result.first_mismatch_indices == tuple(int(i) for i in np.flatnonzero(~equal)[:16])
    assert bool(result) == bool(equal.all())
    same = fusebench.bit_equal(as_format(a_bits, fmt), as_format(a_bits.copy(), fmt))
    assert same and same.mismatches == 0


def reference_near(y_values, rng):
    """fp64 references near y: y itself, y moved by a fraction of its spacing, 0, and random."""
    ref = y_values + rng.uniform(-2, 2, y_values.size) * oracles.spacing(
        np.where(np.isfinite(y_values), y_values, 0), "f16"
    )
    ref[::7] = y_values[::7]
    ref[::11] = 0.0
    return ref


@pytest.mark.parametrize("fmt", ["f16", "bf16"])
def test_ulp_error_every_pattern(fmt):
    rng = np.random.Generator(np.random.Philox(RNG_SEED + 1))
    y_values = oracles.bits_to_values(ALL16, fmt)
    finite = np.where(np.isfinite(y_values), y_values, 0.0)
    ref = finite + rng.uniform(-3, 3, ALL16.size) * oracles.spacing(finite, fmt)
    ref[::7] = y_values[::7]  # exact, infinities and NaNs included
    ref[::11] = 0.0
    got = fusebench.ulp_error(as_format(ALL16, fmt), ref)
    assert got.dtype == np.float64 and got.shape == ALL16.shape
    np.testing.assert_array_equal(got, oracles.ulp_error(y_values, ref, fmt))


@pytest.mark.parametrize("fmt", ["f16", "bf16"])
def test_error_stats_every_pattern(fmt):
    rng = np.random.Generator(np.random.Philox(RNG_SEED + 2))
    y_values = oracles.bits_to_values(ALL16, fmt)
    finite = np.where(np.isfinite(y_values), y_values, 0.0)
    ref = finite + rng.uniform(-3, 3, ALL16.size) * oracles.spacing(finite, fmt)
    ref[::13] = np.nan
    ref[5::17] = np.inf
    stats = fusebench.error_stats(as_format(ALL16, fmt), ref)
    compared = np.isfinite(y_values) & np.isfinite(ref)
    y, r = y_values[compared], ref[compared]
    smallest_normal = 2.0 ** oracles.FORMATS[fmt][1]
    expected = {
        "abs": oracles.summary(np.abs(y - r)),
        "rel": oracles.summary(np.abs(y - r) / np.maximum(np.abs(r), smallest_normal)),
        "ulp_error": oracles.summary(oracles.ulp_error(y, r, fmt)),
    }
    index_of = np.flatnonzero(compared)
    assert (stats.n, stats.compared, stats.dtype, stats.ref_dtype) == (ALL16.size, int(compared.sum()), fmt, "f64")
    assert stats.nan_y == int(np.isnan(y_values).sum()) and stats.nan_ref == int(np.isnan(ref).sum())
    assert stats.inf_y == int(np.isinf(y_values).sum()) and stats.inf_ref == int(np.isinf(ref).sum())
    assert stats.rel_floor == smallest_normal
    for name, want in expected.items():
        got = getattr(stats, name)
        assert got.max == want["max"], name
        assert got.max_index == int(index_of[want["max_index"]]), name
        assert got.p50 == want["p50"] and got.p99 == want["p99"], name
        assert got.mean == pytest.approx(want["mean"], rel=1e-12), name
    # ulp_diff against ref rounded to y's format
    with np.errstate(over="ignore"):
        rounded = (
            ref.astype(np.float16).view(np.uint16) if fmt == "f16" else ref.astype(ml_dtypes.bfloat16).view(np.uint16)
        )
    distance, nan = oracles.ulp_distance(ALL16, rounded, fmt)
    assert stats.ulp_diff.max == int(distance[~nan].max())
    assert stats.ulp_diff.hist.nan_pairs == int(nan.sum())
    d = stats.to_dict()
    assert set(d) >= {
        "n",
        "compared",
        "dtype",
        "ref_dtype",
        "nan",
        "inf",
        "mismatches",
        "abs",
        "rel",
        "ulp_error",
        "ulp_diff",
    }
    assert "ulp" not in d  # the fractional and the integer measure never share a key


def test_result_dicts_are_json():
    a = np.array([1, 2, np.nan], np.float16)
    for result in (
        fusebench.bit_equal(a, a),
        fusebench.ulp_diff(a, a),
        fusebench.error_stats(a, a.astype(np.float64)),
        fusebench.diff(a, a, a.astype(np.float64)),
    ):
        assert json.loads(json.dumps(result.to_dict(), allow_nan=False)) == result.to_dict()


# ---- layouts and operands
def test_strided_and_multidimensional_views_read_in_place():
    rng = np.random.Generator(np.random.Philox(RNG_SEED + 3))
    base = rng.standard_normal((64, 48)).astype(np.float32)
    other = (base.view(np.uint32) + rng.integers(0, 5, base.shape).astype(np.uint32)).view(np.float32)
    for view in (lambda x: x[::3, 1::2], lambda x: x.T, lambda x: x[5]):
        got = fusebench.ulp_diff(view(base), view(other))
        want = fusebench.ulp_diff(np.ascontiguousarray(view(base)), np.ascontiguousarray(view(other)))
        np.testing.assert_array_equal(got.distance, want.distance)
        assert got.distance.shape == view(base).shape
    # Results come back without a copy: the array's memory belongs to the toolkit's tensor.
    result = fusebench.ulp_diff(base, other)
    assert not result.distance.flags.owndata


def test_bfloat16_operands_match_their_bits():
    x = np.linspace(-3, 3, 101).astype(ml_dtypes.bfloat16)
    y = (x.view(np.uint16) + np.uint16(2)).view(ml_dtypes.bfloat16)
    result = fusebench.ulp_diff(x, y)
    expected, _ = oracles.ulp_distance(x.view(np.uint16), y.view(np.uint16), "bf16")
    np.testing.assert_array_equal(result.distance, expected.astype(np.uint16))


class ArrayInterfaceOnly:
    """An exporter with nothing but __array_interface__ (as some libraries have)."""

    def __init__(self, array):
        self._array = array
        self.__array_interface__ = array.__array_interface__


def test_array_interface_exporter():
    a = np.array([1.0, 2.0, 3.0], np.float32)
    b = np.array([1.0, 2.0, 3.5], np.float32)
    result = fusebench.bit_equal(ArrayInterfaceOnly(a), ArrayInterfaceOnly(b))
    assert result.mismatches == 1 and result.first_mismatch_indices == (2,)


@pytest.mark.parametrize(
    "call,error,words",
    [
        (lambda: fusebench.ulp_diff(np.zeros(3, np.int32), np.zeros(3, np.int32)), TypeError, ["a", "int32"]),
        (
            lambda: fusebench.ulp_diff(np.zeros(3, np.float16), np.zeros(3, np.float32)),
            TypeError,
            ["a is f16", "b is f32"],
        ),
        (
            lambda: fusebench.ulp_diff(np.zeros(3, np.float16), np.zeros(4, np.float16)),
            ValueError,
            ["shapes differ", "(3,)", "(4,)"],
        ),
        (
            lambda: fusebench.error_stats(np.zeros((2, 3), np.float16), np.zeros((3, 2))),
            ValueError,
            ["y (2, 3)", "ref (3, 2)"],
        ),
        (lambda: fusebench.ulp_error(np.zeros(3, np.float16), [0.0, 1.0, 2.0]), TypeError, ["ref", "list"]),
        (
            lambda: fusebench.bit_equal(np.zeros(8, np.float32)[::-1], np.zeros(8, np.float32)),
            ValueError,
            ["a", "strides"],
        ),
        (
            lambda: fusebench.bit_equal(np.zeros(4, [("x", "<f2"), ("y", "u1")])["x"], np.zeros(4, np.float16)),
            ValueError,
            ["a", "strides"],
        ),
        (lambda: fusebench.bit_equal(np.zeros(3, ">f4"), np.zeros(3, ">f4")), TypeError, ["a", "big-endian"]),
        (
            lambda: fusebench.bit_equal(np.zeros(3, np.float16), np.zeros(3, np.float16), nan="maybe"),
            ValueError,
            ["nan", "maybe"],
        ),
        (lambda: fusebench.ulp_diff(np.zeros(3, np.float16), np.zeros(3, np.float16), bins=0), ValueError, ["bins"]),
        (
            lambda: fusebench.diff(np.zeros(3, np.float16), np.zeros(2, np.float16), names=("left", "right")),
            ValueError,
            ["left", "right"],
        ),
    ],
)
def test_bad_operands_name_the_argument(call, error, words):
    with pytest.raises(error) as raised:
        call()
    for word in words:
        assert word in str(raised.value)


# ---- diff: the same object fusebench-diff --json prints
def write_npy(path, array):
    if array.dtype == ml_dtypes.bfloat16:  # fusebench's bf16 .npy: the one-field record of raw bits
        record = np.zeros(array.shape, dtype=[("bf16", "<u2")])
        record["bf16"] = array.view(np.uint16)
        np.save(path, record)
    else:
        np.save(path, array)


@pytest.mark.parametrize("fmt_b", ["f16", "f32", "bf16"])
def test_diff_matches_fusebench_diff_json(tmp_path, fmt_b):
    tool = os.environ.get("FUSEBENCH_DIFF")
    if not tool:
        pytest.skip("FUSEBENCH_DIFF (path of the fusebench-diff binary) not set; tools/test sets it")
    rng = np.random.Generator(np.random.Philox(RNG_SEED + 4))
    ref = rng.standard_normal((33, 17)) * 4
    ref[0, :3] = [np.inf, np.nan, 0.0]
    a = ref.astype(np.float16)
    b = {
        "f16": (ref * (1 + 1e-3)).astype(np.float16),
        "f32": (ref * (1 + 1e-6)).astype(np.float32),
        "bf16": ref.astype(ml_dtypes.bfloat16),
    }[fmt_b]
    b[0, 1] = 1.0
    paths = [str(tmp_path / f"{n}.npy") for n in ("a", "b", "ref")]
    for path, array in zip(paths, (a, b, ref)):
        write_npy(path, array)
    for with_ref in (False, True):
        command = [tool, paths[0], paths[1], "--json", "--bins", "8"] + (["--ref", paths[2]] if with_ref else [])
        printed = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
        ours = fusebench.diff(a, b, ref if with_ref else None, names=(paths[0], paths[1]), ref_name=paths[2], bins=8)
        assert ours.to_dict() == printed
        assert ours.ulp_diff.max == printed["ulp_diff"]["max"]


def test_diff_typed_fields():
    a = np.array([1.0, 2.0, 3.0, -0.0], np.float16)
    b = np.array([1.0, 2.001, 3.0, 0.0], np.float16)
    d = fusebench.diff(a, b, np.array([1.0, 2.0, 3.0, 0.0]), names=("eager", "fused"))
    assert (d.a, d.b, d.n, d.bit_equal, d.mismatches) == ("eager", "fused", 4, False, 2)
    assert d.ulp_diff.max == 1 and d.ulp_diff.max_index == 1
    assert d.against_ref is not None and d.against_ref.b.ulp_diff.max == 1
    assert fusebench.diff(a, b, signed_zero="equal").mismatches == 1


# ---- packaging
def test_imports_the_installed_package_not_the_source_tree():
    source = pathlib.Path(__file__).resolve().parents[1] / "fusebench"
    installed = pathlib.Path(fusebench.__file__).resolve().parent
    assert installed != source
    assert "site-packages" in installed.parts


def test_import_works_without_torch_and_the_torch_helpers_say_what_is_missing():
    code = (
        "import sys; sys.modules['torch'] = None\n"  # makes `import torch` fail
        "import fusebench, numpy as np\n"
        "assert fusebench.bit_equal(np.ones(2, np.float16), np.ones(2, np.float16))\n"
        "for f in (fusebench.fp64_reference, fusebench.compare_fused):\n"
        "    try:\n"
        "        f(lambda x: x, np.ones(2))\n"
        "    except ImportError as e:\n"
        "        assert 'PyTorch' in str(e) and 'pip install torch' in str(e), e\n"
        "    else:\n"
        "        raise SystemExit('no ImportError')\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_empty_scalar_and_broadcast_operands():
    empty = fusebench.ulp_diff(np.zeros(0, np.float16), np.zeros(0, np.float16))
    assert (empty.max, empty.max_index, empty.mean, empty.compared) == (None, -1, None, 0)
    assert fusebench.error_stats(np.zeros(0, np.float16), np.zeros(0)).ulp_error.max is None
    scalar = fusebench.ulp_diff(np.array(1.0, np.float16), np.array(1.0009765625, np.float16))
    assert scalar.max == 1 and scalar.distance.shape == ()
    broadcast = np.broadcast_to(np.float32(1.0), (4, 3))  # stride 0: read through its strides
    assert fusebench.bit_equal(broadcast, np.ones((4, 3), np.float32))
    read_only = np.ones(5, np.float16)
    read_only.flags.writeable = False
    assert fusebench.bit_equal(read_only, read_only)


def test_operands_are_borrowed_not_copied():
    from fusebench import _core
    from fusebench._operands import operand

    base = np.arange(64, dtype=np.float32).reshape(8, 8)
    for array in (base, base[2:, 1::2], base.T, np.linspace(0, 1, 9).astype(ml_dtypes.bfloat16)):
        op = operand(array, "x", "test")
        assert _core.borrowed_address(op.obj, op.bf16_bits) == array.__array_interface__["data"][0]

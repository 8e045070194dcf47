"""JAX arrays (CPU) through DLPack, bfloat16 included (skipped where jax is not installed)."""

import fusebench
import numpy as np
import oracles
import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

ALL16 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)


@pytest.mark.parametrize("dtype,fmt", [("float16", "f16"), ("bfloat16", "bf16")])
def test_jax_arrays_every_pattern(dtype, fmt):
    a = jax.lax.bitcast_convert_type(jnp.asarray(ALL16), getattr(jnp, dtype))
    b = jnp.roll(a, 1)
    result = fusebench.ulp_diff(a, b)
    expected, nan = oracles.ulp_distance(ALL16, np.roll(ALL16, 1), fmt)
    np.testing.assert_array_equal(result.distance[~nan].astype(np.uint64), expected[~nan])
    assert result.nan_pairs == int(nan.sum())
    with np.errstate(invalid="ignore"):  # NaN payloads widen quietly
        ref = np.asarray(a.astype(jnp.float32)).astype(np.float64)
    stats = fusebench.error_stats(a, ref)
    assert stats.ulp_error.max == 0.0 and stats.compared == int(np.isfinite(oracles.bits_to_values(ALL16, fmt)).sum())


def test_jax_wrong_dtype_names_the_argument():
    with pytest.raises(TypeError, match="b has dtype int32"):
        fusebench.bit_equal(jnp.zeros(3), jnp.zeros(3, dtype=jnp.int32))


def test_jax_operands_are_borrowed_not_copied():
    from fusebench import _core
    from fusebench._operands import operand

    for array in (jnp.arange(64, dtype=jnp.float32), jnp.ones(16, dtype=jnp.bfloat16)):
        op = operand(array, "x", "test")
        assert _core.borrowed_address(op.obj, op.bf16_bits) == array.unsafe_buffer_pointer()

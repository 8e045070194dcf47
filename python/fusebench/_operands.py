"""Operands: numpy arrays, and anything exposing DLPack or the array interface (PyTorch, JAX).

An operand goes to the C++ toolkit without a copy: numpy arrays through the buffer protocol,
tensors through DLPack. bfloat16 numpy arrays (ml_dtypes.bfloat16) are passed as a uint16 view of
the same memory, tagged as bfloat16. Checks happen here, once, with messages that name the
function and the argument.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

# Canonical short names, as fusebench's C++ side and its JSON use them.
_FLOAT_NAMES = {"float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64"}
_WIDTH_BITS = {"f16": 16, "bf16": 16, "f32": 32, "f64": 64}


@dataclass(frozen=True)
class Operand:
    obj: Any  # what the C++ module borrows (numpy array or DLPack exporter)
    bf16_bits: bool  # obj holds bfloat16 values as uint16
    dtype: str  # f16, bf16, f32, f64
    shape: tuple[int, ...]
    source: Any  # the caller's object, for messages


def _is_torch(x: Any) -> bool:
    return type(x).__module__.split(".")[0] == "torch"


def _dtype_name(x: Any) -> str:
    """numpy / torch / jax dtype as a plain name: float16, bfloat16, int32, ..."""
    dtype = getattr(x, "dtype", None)
    name = getattr(dtype, "name", None) or str(dtype)
    return name.replace("torch.", "")


def _unsupported_dtype(fn: str, name: str, dtype_name: str) -> TypeError:
    return TypeError(f"{fn}: {name} has dtype {dtype_name}; fusebench compares float16, bfloat16, float32 or float64")


def _check_numpy_layout(fn: str, name: str, x: np.ndarray) -> None:
    itemsize = x.dtype.itemsize
    for extent, stride in zip(x.shape, x.strides):
        if extent > 1 and (stride < 0 or stride % itemsize != 0):
            raise ValueError(
                f"{fn}: {name} has strides {x.strides} (bytes) for {itemsize}-byte elements, a layout "
                f"that cannot be viewed without a copy; pass numpy.ascontiguousarray({name})"
            )
    if x.dtype.byteorder == ">":
        raise TypeError(f"{fn}: {name} is big-endian ({x.dtype.str}); pass {name}.astype({x.dtype.name!r})")


def operand(x: Any, name: str, fn: str) -> Operand:
    """Checks x and returns what the C++ module borrows. Raises TypeError for a wrong type or dtype,
    ValueError for a layout that cannot be viewed."""
    if isinstance(x, np.ndarray):
        dtype_name = x.dtype.name
        if dtype_name not in _FLOAT_NAMES:
            raise _unsupported_dtype(fn, name, str(x.dtype))
        _check_numpy_layout(fn, name, x)
        if dtype_name == "bfloat16":
            return Operand(x.view(np.uint16), True, "bf16", tuple(x.shape), x)
        return Operand(x, False, _FLOAT_NAMES[dtype_name], tuple(x.shape), x)
    if _is_torch(x) and hasattr(x, "device"):
        if x.device.type != "cpu":
            raise TypeError(f"{fn}: {name} is on device {x.device}; fusebench reads CPU memory: pass {name}.cpu()")
        dtype_name = _dtype_name(x)
        if dtype_name not in _FLOAT_NAMES:
            raise _unsupported_dtype(fn, name, f"torch.{dtype_name}")
        tensor = x.detach()  # DLPack refuses tensors that require grad; detach shares the memory
        if tensor.is_neg():
            tensor = tensor.resolve_neg()
        return Operand(tensor, False, _FLOAT_NAMES[dtype_name], tuple(tensor.shape), x)
    if hasattr(x, "__dlpack__"):  # JAX, CuPy, ...: the C++ side imports the DLPack capsule
        dtype_name = _dtype_name(x)
        if dtype_name not in _FLOAT_NAMES:
            raise _unsupported_dtype(fn, name, dtype_name)
        return Operand(x, False, _FLOAT_NAMES[dtype_name], tuple(int(e) for e in x.shape), x)
    if hasattr(x, "__array_interface__") or hasattr(x, "__array_struct__"):
        array = np.asarray(x)  # a view of the exporter's memory
        op = operand(array, name, fn)
        return Operand(op.obj, op.bf16_bits, op.dtype, op.shape, x)
    raise TypeError(
        f"{fn}: {name} must be an array (numpy, or an object exposing DLPack or __array_interface__), "
        f"got {type(x).__name__}"
    )


def check_same_shape(fn: str, a: Operand, b: Operand, a_name: str, b_name: str) -> None:
    if a.shape != b.shape:
        raise ValueError(f"{fn}: shapes differ: {a_name} {a.shape} vs {b_name} {b.shape}")


def check_same_dtype(fn: str, a: Operand, b: Operand, a_name: str, b_name: str, hint: str = "") -> None:
    if a.dtype != b.dtype:
        raise TypeError(
            f"{fn}: {a_name} is {a.dtype} but {b_name} is {b.dtype}; {fn} compares two arrays of one format{hint}"
        )


# ---- elements for messages (a few of them; never on the hot path)
def element_bits_and_values(op: Operand, indices) -> tuple[np.ndarray, np.ndarray]:
    """Bits (unsigned integers of the format's width) and values (float64, exact for every format)
    of the elements at the given row-major flat indices."""
    indices = np.asarray(list(indices), dtype=np.int64)
    unsigned = f"<u{_WIDTH_BITS[op.dtype] // 8}"
    obj = op.obj
    if _is_torch(obj):
        import torch

        flat = obj.reshape(-1)[torch.from_numpy(indices)]
        bits = (flat.view(torch.int16) if op.dtype == "bf16" else flat).numpy().view(unsigned)
    else:
        array = obj if isinstance(obj, np.ndarray) else np.asarray(obj)
        if op.dtype == "bf16" and array.dtype != np.uint16:
            array = array.view(np.uint16)
        if array.ndim == 0:
            array = array.reshape(1)
        picked = array[np.unravel_index(indices, array.shape)] if indices.size else array.reshape(-1)[:0]
        bits = np.ascontiguousarray(picked).view(unsigned)
    return bits, bits_to_float64(bits, op.dtype)


def bits_to_float64(bits: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bf16":
        return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if dtype == "f16":
        return bits.view(np.float16).astype(np.float64)
    if dtype == "f32":
        return bits.view(np.float32).astype(np.float64)
    return bits.view(np.float64).copy()

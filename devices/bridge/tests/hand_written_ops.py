"""Checks the framework devices' eager path against each op written by hand in the framework.

The C++ test (test_framework_devices.cpp) runs one small graph per op through the device's eager
executor and writes, per case, <dir>/<case>/case.json ({"op", "inputs", "scalar"}), the inputs
(<name>.npy) and the device's output (out.npy). This script recomputes every case with the op
as a user writes it in that framework (in JAX, each op a jax.jit of its own) and compares the
bits. Exit 0 when every case is bit-equal; otherwise it prints each mismatch (case, count, first
element and both values) and exits 1.

Usage: python hand_written_ops.py --framework torch|jax DIR
"""

import argparse
import json
import os
import sys

import numpy as np


def load_npy(path):
    array = np.load(path)
    if array.dtype.names == ("bf16",):
        return array.view(np.uint16), "bf16"
    return array, array.dtype.name


def torch_ops():
    import torch
    import torch.nn.functional as F

    def to_torch(array, dtype):
        t = torch.from_numpy(array.copy())
        return t.view(torch.bfloat16) if dtype == "bf16" else t

    def to_bits(t):
        t = t.contiguous()
        return t.view(torch.int16).numpy().view(np.uint16) if t.dtype == torch.bfloat16 else t.numpy()

    ops = {
        "add": lambda a, b: a + b,
        "sub": lambda a, b: a - b,
        "mul": lambda a, b: a * b,
        "div": lambda a, b: a / b,
        "add_scalar": lambda a, s: a + s,
        "mul_scalar": lambda a, s: a * s,
        "mul_scalar_broadcast": lambda a, s: a * torch.full_like(a, s),
        "neg": lambda a: -a,
        "exp": torch.exp,
        "sqrt": torch.sqrt,
        "rsqrt": torch.rsqrt,
        "gelu": F.gelu,
        "gelu_tanh": lambda a: F.gelu(a, approximate="tanh"),
        "cast_f32": lambda a: a.float(),
        "cast_bf16": lambda a: a.bfloat16(),
        "sum": lambda a: a.sum(dim=-1),
        "mean": lambda a: a.mean(dim=-1),
        "max": lambda a: a.max(dim=-1).values,
        "layernorm": lambda a, w, b: F.layer_norm(a, a.shape[-1:], w, b, eps=1e-5),
        "softmax": lambda a: torch.softmax(a, dim=-1),
        "matmul": lambda a, b: a @ b,
        "transpose": lambda a: a.t(),
        "reshape": lambda a: a.reshape(32, 8),
        "slice": lambda a: a[:, 4:12],
        "concat": lambda a, b: torch.cat([a, b], dim=0),
        "expand": lambda a: a.expand(4, 8, 32),
    }
    return ops, to_torch, to_bits


def jax_ops():
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import ml_dtypes

    def to_jax(array, dtype):
        return jnp.asarray(array.view(ml_dtypes.bfloat16) if dtype == "bf16" else array)

    def to_bits(x):
        array = np.asarray(x)
        return array.view(np.uint16) if array.dtype == ml_dtypes.bfloat16 else array

    def layernorm(a, w, b):
        xf = a.astype(jnp.float32)
        mean = xf.mean(axis=-1, keepdims=True)
        var = ((xf - mean) ** 2).mean(axis=-1, keepdims=True)
        return ((xf - mean) * jax.lax.rsqrt(var + 1e-5) * w.astype(jnp.float32) + b.astype(jnp.float32)).astype(a.dtype)

    ops = {
        "add": lambda a, b: a + b,
        "sub": lambda a, b: a - b,
        "mul": lambda a, b: a * b,
        "div": lambda a, b: a / b,
        "add_scalar": lambda a, s: a + s,
        "mul_scalar": lambda a, s: a * s,
        "mul_scalar_broadcast": lambda a, s: a * jnp.full_like(a, s),
        "neg": lambda a: -a,
        "exp": jnp.exp,
        "sqrt": jnp.sqrt,
        "rsqrt": jax.lax.rsqrt,
        "gelu": lambda a: jax.nn.gelu(a, approximate=False),
        "gelu_tanh": lambda a: jax.nn.gelu(a, approximate=True),
        "cast_f32": lambda a: a.astype(jnp.float32),
        "cast_bf16": lambda a: a.astype(jnp.bfloat16),
        "sum": lambda a: a.sum(axis=-1),
        "mean": lambda a: a.mean(axis=-1),
        "max": lambda a: a.max(axis=-1),
        "layernorm": layernorm,
        "softmax": lambda a: jax.nn.softmax(a, axis=-1),
        "matmul": lambda a, b: a @ b,
        "transpose": lambda a: a.T,
        "reshape": lambda a: a.reshape(32, 8),
        "slice": lambda a: a[:, 4:12],
        "concat": lambda a, b: jnp.concatenate([a, b], axis=0),
        "expand": lambda a: jnp.broadcast_to(a, (4, 8, 32)),
    }

    def jitted(op):
        """The op as a JAX user runs it, and device xla's eager does: one jax.jit, its value rounded
        once at its output. A Python scalar operand (always the last) is a constant of the op."""

        def call(*args):
            if args and isinstance(args[-1], float):
                scalar = args[-1]
                return jax.jit(lambda *arrays: op(*arrays, scalar))(*args[:-1])
            return jax.jit(op)(*args)

        return call

    return {name: jitted(op) for name, op in ops.items()}, to_jax, to_bits


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--framework", choices=["torch", "jax"], required=True)
    parser.add_argument("dir")
    args = parser.parse_args()
    ops, to_framework, to_bits = torch_ops() if args.framework == "torch" else jax_ops()
    failures, cases = 0, sorted(os.listdir(args.dir))
    for case in cases:
        spec = json.load(open(os.path.join(args.dir, case, "case.json")))
        inputs = []
        for name in spec["inputs"]:
            array, dtype = load_npy(os.path.join(args.dir, case, name + ".npy"))
            inputs.append(to_framework(array, dtype))
        if "scalar" in spec:
            inputs.append(spec["scalar"])
        expected = to_bits(ops[spec["op"]](*inputs))
        got, _ = load_npy(os.path.join(args.dir, case, "out.npy"))
        if expected.shape != got.shape or expected.dtype.itemsize != got.dtype.itemsize:
            print(f"{case}: hand-written {expected.dtype}{expected.shape}, device {got.dtype}{got.shape}")
            failures += 1
            continue
        bits = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[expected.dtype.itemsize]
        differ = np.flatnonzero(expected.view(bits).ravel() != got.view(bits).ravel())
        if differ.size:
            i = differ[0]
            print(
                f"{case}: {differ.size} of {expected.size} elements differ; first at flat index {i}: "
                f"hand-written {expected.ravel()[i]!r} (0x{expected.view(bits).ravel()[i]:x}), "
                f"device {got.ravel()[i]!r} (0x{got.view(bits).ravel()[i]:x})"
            )
            failures += 1
    print(f"{args.framework}: {len(cases) - failures} of {len(cases)} ops bit-equal to the hand-written op")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

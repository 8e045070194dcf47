"""Checks that device xla's eager runs each op as one jax.jit, not primitive by primitive.

The C++ test (test_framework_devices.cpp, Xla.EagerIsOneJaxJitPerOp) runs an f16 tanh-gelu graph
through the device's eager executor and writes DIR/x.npy (the input: every finite f16 in [-8, 8])
and DIR/eager.npy (the device's output). This script recomputes the op as jax.jit(jax.nn.gelu)
(the op rounded once, at its output) and under jax.disable_jit() (each of its primitives rounded
to f16), and requires the device's bits to equal the jitted op's and the two references to differ
somewhere: otherwise the input could not tell one jit per op from primitive by primitive.
Exit 0 when both hold; 77 when the device equals the jitted op but the two references agree on
every element (this processor's XLA:CPU gives the same bits either way, so nothing here can tell
one jit per op from primitive by primitive: the C++ test skips, saying so); otherwise it prints
what failed, with the first differing element, and exits 1.

Usage: python xla_eager_is_jit_per_op.py DIR
"""

import os
import sys

import numpy as np


def first_difference(name_a, a, name_b, b):
    differ = np.flatnonzero(a.view(np.uint16) != b.view(np.uint16))
    if not differ.size:
        return differ, ""
    i = differ[0]
    return differ, (
        f"{differ.size} of {a.size} elements differ; first at flat index {i}: {name_a} {a[i]!r} "
        f"(0x{a.view(np.uint16)[i]:04x}), {name_b} {b[i]!r} (0x{b.view(np.uint16)[i]:04x})"
    )


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    import jax

    jax.config.update("jax_platforms", "cpu")
    x = np.load(os.path.join(sys.argv[1], "x.npy"))
    eager = np.load(os.path.join(sys.argv[1], "eager.npy"))
    if x.dtype != np.float16 or eager.dtype != np.float16 or x.shape != eager.shape:
        print(f"expected two f16 arrays of one shape, got x {x.dtype}{x.shape}, eager {eager.dtype}{eager.shape}")
        return 1
    jitted = np.asarray(jax.jit(lambda a: jax.nn.gelu(a, approximate=True))(x))
    with jax.disable_jit():
        by_primitive = np.asarray(jax.nn.gelu(x, approximate=True))
    failures = 0
    indistinct = False
    differ, text = first_difference("device eager", eager, "jax.jit(gelu)", jitted)
    if differ.size:
        print(f"device eager is not one jax.jit per op: {text}")
        failures += 1
    else:
        print(f"device eager equals jax.jit(gelu) on all {x.size} elements")
    differ, text = first_difference("jax.jit(gelu)", jitted, "disable_jit", by_primitive)
    if not differ.size:
        print(
            "jax.jit(gelu) and gelu under jax.disable_jit() agree on every element: the input no longer tells them apart"
        )
        indistinct = True
    else:
        print(f"jax.jit(gelu) against primitive by primitive (jax.disable_jit()): {text}")
    return 1 if failures else (77 if indistinct else 0)


if __name__ == "__main__":
    sys.exit(main())

"""A user's test file: one passing and one failing use of the fusebench fixture (run by
test_plugin.py in a subprocess; the plugin comes from the installed package's pytest11 entry point)."""

import numpy as np


def test_rounding_is_within_one_ulp(fusebench):
    x = np.linspace(-2, 2, 1001)
    y = x.astype(np.float16)
    fusebench.assert_ulp_within(y, (x * (1 + 2.0**-12)).astype(np.float16), 1)
    fusebench.assert_error_within(y, x, ulp_max=0.5, rel_p99=2.0**-11)


def test_fused_result_is_bit_equal(fusebench):
    eager = np.array([1.0, 2.0, 3.0, 4.0], np.float16)
    fused = eager.copy()
    fused[2] = np.float16(3.001953125)  # one ULP above 3.0 (0x4201)
    fusebench.assert_bit_equal(fused, eager)

"""Arrays across the bridge: .npy files as fusebench writes them (bf16 as the one-field record
[('bf16', '<u2')] holding the raw bits), mapped rather than read."""

import os

import numpy as np

BF16_RECORD = np.dtype([("bf16", "<u2")])


def load(path):
    """(array, dtype name): a copy-on-write memory map of the file (no copy; writable, as
    torch.from_numpy wants), bf16 as its uint16 bits."""
    array = np.load(path, mmap_mode="c")
    if array.dtype.names == ("bf16",):
        return array.view(np.uint16), "bf16"
    return array, array.dtype.name


def save(array, path, bf16=False):
    """Writes `array` (bf16: its uint16 bits) as .npy, through a temporary name."""
    array = np.ascontiguousarray(array)
    if bf16:
        array = array.view(np.uint16).view(BF16_RECORD)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        np.save(f, array)
    os.replace(tmp, path)

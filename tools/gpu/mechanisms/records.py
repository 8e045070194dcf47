"""JSON records: timestamps, counts with separators, error records, JSON-safe copies, atomic writes,
file names."""

from __future__ import annotations

import datetime
import json
import math
import os
import re
import traceback


def now_utc() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def fmt_int(n) -> str:
    return f"{n:,}" if isinstance(n, int) else str(n)


def error_record(exc: BaseException) -> dict:
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    lines = "".join(tb).rstrip().splitlines()
    return {"type": type(exc).__name__, "message": str(exc)[:2000], "traceback_tail": lines[-15:]}


def sanitize(obj):
    """JSON-safe copy: non-finite floats become strings, tuples lists, unknown objects repr."""
    if isinstance(obj, dict):
        return {str(k): sanitize(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        items = sorted(obj, key=repr) if isinstance(obj, set | frozenset) else obj
        return [sanitize(v) for v in items]
    if isinstance(obj, bool) or obj is None or isinstance(obj, int | str):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else repr(obj)
    return repr(obj)


def write_json_atomic(path: str, data: dict):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(sanitize(data), f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def _fname(*parts) -> str:
    return "__".join(re.sub(r"[^\w.-]+", "_", p) for p in parts)

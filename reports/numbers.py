"""The report's one number format: three significant figures, thousands separators, '—' for a missing
value (the claims' conditions and the sections' tables both use it)."""

from __future__ import annotations

import math

from reports.decision import num  # the one format, shared with fusebench.judge's words


def pct(share, sig: int = 3) -> str:
    """A share (0.71) as a percentage ('71.0 %'), non-breaking space before the sign."""
    return "—" if share is None else num(100 * share, sig) + "\u00a0%"


def yesno(flag) -> str:
    return "—" if flag is None else ("yes" if flag else "no")


def gbps(bytes_per_second: float | None) -> str:
    return "—" if bytes_per_second is None else num(bytes_per_second / 1e9)


def signed_pct(x: float) -> str:
    """A relative change with its sign ('+5.00 %', '−0.380 %'); ±∞ where eager's figure is 0."""
    if math.isinf(x):
        return "+∞" if x > 0 else "−∞"
    return ("+" if x >= 0 else "−") + pct(abs(x))

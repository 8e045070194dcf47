"""The report's one number format: three significant figures, thousands separators, '—' for a missing
value (the claims' conditions and the sections' tables both use it)."""

from __future__ import annotations

import math


def num(x, sig: int = 3) -> str:
    """Integers exactly, with thousands separators; other values to `sig` significant figures, in
    scientific notation only below 0.001; '—' for a missing value."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    if isinstance(x, float) and math.isinf(x):
        return "∞" if x > 0 else "−∞"
    x = float(x)
    if x == int(x) and abs(x) < 1e15:
        return f"{int(x):,}".replace("-", "−")
    magnitude = math.floor(math.log10(abs(x)))
    if abs(x) < 1e-3:
        return f"{x:.{sig - 1}e}".replace("-", "−")
    decimals = max(0, sig - 1 - magnitude)
    return f"{x:,.{decimals}f}".replace("-", "−")


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

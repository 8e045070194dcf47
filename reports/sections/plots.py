"""matplotlib set-up shared by every figure: text of at least 9 pt at the size the page shows it (the
report shows figures unscaled, 100 px per inch, so points in the figure are points on the page)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

MIN_TEXT_PT = 9.5
plt.rcParams.update(
    {
        "font.size": 10,
        "axes.titlesize": 10.5,
        "axes.labelsize": 10,
        "xtick.labelsize": MIN_TEXT_PT,
        "ytick.labelsize": MIN_TEXT_PT,
        "legend.fontsize": MIN_TEXT_PT,
        "figure.titlesize": 11,
        "axes.grid": True,
        "grid.alpha": 0.3,
    }
)

EAGER, FUSED, EMULATED = "#c0392b", "#2471a3", "#7d3c98"


def figure(width_in: float, height_in: float, rows: int = 1, cols: int = 1, **kw):
    """A figure with constrained layout (its size on the page is exactly width_in × 100 px)."""
    return plt.subplots(rows, cols, figsize=(width_in, height_in), layout="constrained", squeeze=False, **kw)


def close(fig):
    plt.close(fig)

"""Memory over one step as a picture: bytes live after each op, the forward/backward boundary, the budget.

SVG is written by hand (no plotting dependency); PNG needs matplotlib and is made only if it is importable.
"""
from __future__ import annotations

from html import escape

import numpy as np

from tfplus import gfile
from tfplus.planner.plan import MemoryPlan
from tfplus.units import format_size


def write_plot(p: MemoryPlan, path: str, title: str = "memory over one step") -> None:
    """Writes `path` (.svg, or .png when matplotlib is installed)."""
    if path.lower().endswith(".png"):
        _png(p, path, title)
    elif path.lower().endswith(".svg"):
        gfile.write_output(path, svg(p, title).encode())
    else:
        raise ValueError(f"--plot {path!r}: the file name must end in .svg or .png")


def _series(p: MemoryPlan):
    y = p.fixed_bytes + np.asarray(p.live, dtype=np.float64)
    top = max(float(y.max()) if len(y) else 0.0, float(p.peak_bytes), float(p.budget_bytes or 0))
    top = top * 1.08 or 1.0
    return y, top


def svg(p: MemoryPlan, title: str = "memory over one step") -> str:
    """The plot as an SVG document."""
    w, h, left, right, top_m, bottom = 900, 420, 80, 20, 40, 50
    y, top = _series(p)
    n = max(1, len(y))
    sx = (w - left - right) / n
    sy = (h - top_m - bottom) / top

    def px(i):
        return left + i * sx

    def py(v):
        return h - bottom - v * sy

    pts = []
    for i, v in enumerate(y):  # a step line: each op's bytes hold for its whole step
        pts += [f"{px(i):.1f},{py(v):.1f}", f"{px(i + 1):.1f},{py(v):.1f}"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" '
           f'font-size="12"><rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w / 2}" y="20" text-anchor="middle" font-size="14">{escape(title)}</text>',
           f'<line x1="{left}" y1="{h - bottom}" x2="{w - right}" y2="{h - bottom}" stroke="black"/>',
           f'<line x1="{left}" y1="{top_m}" x2="{left}" y2="{h - bottom}" stroke="black"/>',
           f'<text x="{w / 2}" y="{h - 12}" text-anchor="middle">op (execution order)</text>']
    for k in range(5):
        v = top * k / 4
        out.append(f'<text x="{left - 6}" y="{py(v) + 4:.1f}" text-anchor="end">{format_size(int(v))}</text>')
        out.append(f'<line x1="{left}" y1="{py(v):.1f}" x2="{w - right}" y2="{py(v):.1f}" stroke="#ddd"/>')
    out.append(f'<polyline fill="none" stroke="#1f77b4" stroke-width="1.5" points="{" ".join(pts)}"/>')
    out.append(_hline(px, py, n, p.peak_bytes, "#555", f"peak {format_size(p.peak_bytes)} (arena + variables "
                      "+ feeds)", "4,3"))
    if p.budget_bytes is not None:
        out.append(_hline(px, py, n, p.budget_bytes, "#d62728", f"budget {format_size(p.budget_bytes)}",
                          "8,4"))
    b = p.backward_step
    if b is not None:
        out.append(f'<line x1="{px(b):.1f}" y1="{top_m}" x2="{px(b):.1f}" y2="{h - bottom}" stroke="#2ca02c" '
                   f'stroke-dasharray="6,3"/><text x="{px(b) + 4:.1f}" y="{top_m + 12}" fill="#2ca02c">'
                   'backward</text>')
    if p.microbatches > 1:
        out.append(f'<text x="{left + 4}" y="{top_m + 26}" fill="#9467bd">micro-batch run, repeated '
                   f'{p.microbatches} times</text>')
    for ph in p.phases[1:]:
        out.append(f'<line x1="{px(ph.start):.1f}" y1="{top_m}" x2="{px(ph.start):.1f}" y2="{h - bottom}" '
                   f'stroke="#9467bd" stroke-dasharray="2,2"/>'
                   f'<text x="{px(ph.start) + 4:.1f}" y="{top_m + 26}" '
                   f'fill="#9467bd">{escape(ph.name)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _hline(px, py, n, v, color, label, dash) -> str:
    return (f'<line x1="{px(0):.1f}" y1="{py(v):.1f}" x2="{px(n):.1f}" y2="{py(v):.1f}" stroke="{color}" '
            f'stroke-dasharray="{dash}"/><text x="{px(n) - 4:.1f}" y="{py(v) - 4:.1f}" text-anchor="end" '
            f'fill="{color}">{escape(label)}</text>')


def _png(p: MemoryPlan, path: str, title: str) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ValueError(f"--plot {path!r}: PNG needs matplotlib, which is not installed; write an .svg") \
            from None
    y, top = _series(p)
    fig, ax = plt.subplots(figsize=(9, 4.2))
    ax.step(np.arange(len(y)), y / 1e6, where="post", label="live bytes")
    ax.axhline(p.peak_bytes / 1e6, color="#555", ls=":", label="peak")
    if p.budget_bytes is not None:
        ax.axhline(p.budget_bytes / 1e6, color="#d62728", ls="--", label="budget")
    if p.backward_step is not None:
        ax.axvline(p.backward_step, color="#2ca02c", ls="--", label="backward")
    ax.set(xlabel="op (execution order)", ylabel="MB", title=title, ylim=(0, top / 1e6))
    ax.legend()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)

"""TensorFlow Playground's colours: orange for class 0 (its negative class), blue for class 1, white between."""

from __future__ import annotations

ORANGE = "#f59322"
BLUE = "#0877bd"
WHITE = "#e8eaeb"
CLASS_COLORS = (ORANGE, BLUE)


def diverging(n: int = 256) -> list[str]:
    """``n`` hex colours from orange through Playground's light grey to blue (for values in [−1, 1])."""

    def rgb(h: str) -> tuple[int, int, int]:
        return int(h[1:3], 16), int(h[3:5], 16), int(h[5:7], 16)

    lo, mid, hi = rgb(ORANGE), rgb(WHITE), rgb(BLUE)
    out = []
    for i in range(n):
        t = i / (n - 1) * 2 - 1
        a, b, w = (mid, lo, -t) if t < 0 else (mid, hi, t)
        out.append("#" + "".join(f"{round(a[k] + (b[k] - a[k]) * w):02x}" for k in range(3)))
    return out


DIVERGING = diverging()

"""A report figure as a PNG file: the pixels matplotlib's `savefig` draws, compressed in half the time.

`savefig(..., format="png")` draws the figure with Agg and hands the RGBA buffer to Pillow at zlib level 6:
in a 240-row report that compression was a fifth of the figures' PNG time. Here the figure is drawn the same
way (an Agg canvas at the file's dpi, as `savefig` does), and an opaque figure (every report figure: a white
face) is stored as RGB rather than RGBA at zlib level 3: the same pixels, a file a few per cent smaller, its
compression about twice as fast. The text chunk names matplotlib as `savefig` does; the dpi is recorded."""

from __future__ import annotations

from pathlib import Path

COMPRESS_LEVEL = 3  # zlib: 6 (Pillow's default) gains 7% on these figures and costs 60% more time


def write_png(fig, path: Path, dpi: float) -> None:
    """Draw `fig` at `dpi` and write it to `path` (the figure's own size: no crop)."""
    import matplotlib
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from PIL import Image, PngImagePlugin

    canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
    before = fig.dpi
    fig.dpi = dpi  # as savefig does, for the drawing only
    try:
        canvas.draw()
        rgba = np.asarray(canvas.buffer_rgba())
    finally:
        fig.dpi = before
    image = Image.fromarray(np.ascontiguousarray(rgba[..., :3]) if (rgba[..., 3] == 255).all() else rgba)
    info = PngImagePlugin.PngInfo()
    info.add_text("Software", f"Matplotlib version{matplotlib.__version__}, https://matplotlib.org/")
    image.save(path, format="png", compress_level=COMPRESS_LEVEL, pnginfo=info, dpi=(dpi, dpi))

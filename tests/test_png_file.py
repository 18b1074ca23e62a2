"""The report's PNG writer (reporting/png_file.py): the pixels matplotlib's savefig draws, stored as RGB where
the figure is opaque, at the figure's own size and dpi."""

import io

import numpy as np
import pytest
from PIL import Image

from orchestrator.reporting.plots import DPI, Frame
from orchestrator.reporting.png_file import write_png


def _figure(transparent: bool = False):
    fig, axes = Frame(1, 2, (2.0, 1.5)).figure()
    for index, ax in enumerate(axes[0]):
        ax.plot([1, 2, 3], [index, 2, 1], marker="o", label=f"line {index}")
        ax.text(2, 1.5, f"cell {index}: 12.34", fontsize=6, ha="center")
        ax.set_title(f"panel {index}")
    if transparent:
        fig.patch.set_alpha(0.0)
    return fig


def _savefig_pixels(fig) -> np.ndarray:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    buffer.seek(0)
    with Image.open(buffer) as image:
        return np.asarray(image.convert("RGBA"))


@pytest.mark.parametrize("transparent", [False, True])
def test_the_same_pixels_as_savefig(tmp_path, transparent):
    fig = _figure(transparent)
    path = tmp_path / "figure.png"
    write_png(fig, path, DPI)
    expected = _savefig_pixels(fig)  # drawn again, by matplotlib's own writer
    with Image.open(path) as image:
        assert image.mode == ("RGBA" if transparent else "RGB")  # an alpha channel only where it says something
        assert image.size == (expected.shape[1], expected.shape[0])
        assert round(image.info["dpi"][0]) == DPI
        assert image.info["Software"].startswith("Matplotlib")
        assert np.array_equal(np.asarray(image.convert("RGBA")), expected)
    assert fig.dpi != DPI  # the figure's own dpi is left as it was (the layout tests measure it afterwards)

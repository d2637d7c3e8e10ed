"""Test images made from pixels the gate knows: a solid colour whose name a vision model must say back."""

from __future__ import annotations

import base64
import io

from PIL import Image

__all__ = ["COLOURS", "png_data_url", "solid_png"]

COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (220, 20, 20),
    "green": (20, 180, 40),
    "blue": (20, 40, 220),
}


def solid_png(rgb: tuple[int, int, int], size: int = 64) -> bytes:
    image = Image.new("RGB", (size, size), rgb)
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def png_data_url(png: bytes) -> str:
    """An ``image_url`` the OpenAI API accepts inline (the only form that reaches the model: INC-84)."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")

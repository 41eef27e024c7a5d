"""Synthetic test videos whose frames carry their own index, so any decoded frame can verify itself.

Each frame shows its index as INDEX_BITS black/white blocks (8 per row, block side
`code_block_px(width, height)`, at least 8 px so it survives 4:2:0 chroma and compression),
over a flat gray background or, with `noise=True`, a moving noise texture that gives bitrates
like real video.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

INDEX_BITS = 24
BITS_PER_ROW = 8
CODE_ROWS = INDEX_BITS // BITS_PER_ROW
MIN_BLOCK_PX = 8
WHITE = 235
BLACK = 16
BACKGROUND = 128

# container format chosen by extension; anything else is left to FFmpeg's guess
_FORMAT_BY_EXT = {".h264": "h264", ".264": "h264", ".hevc": "hevc", ".265": "hevc"}


def code_block_px(width: int, height: int) -> int:
    """Side of one bit block: as large as fits in the top half of the frame."""
    return min(width // BITS_PER_ROW, height // (2 * CODE_ROWS))


def paint_index(rgb: np.ndarray, index: int) -> None:
    """Paints `index` into the top-left corner of an HxWx3 uint8 frame, in place."""
    height, width = rgb.shape[:2]
    block_px = code_block_px(width, height)
    if block_px < MIN_BLOCK_PX:
        raise ValueError(f"frame {width}x{height} too small for the index code (min 64x48)")
    if not 0 <= index < 1 << INDEX_BITS:
        raise ValueError(f"index {index} out of range [0, {1 << INDEX_BITS})")
    for bit, y, x in _block_origins(block_px):
        rgb[y : y + block_px, x : x + block_px] = WHITE if index >> bit & 1 else BLACK


def read_painted_index(rgb: np.ndarray) -> int:
    """Recovers the index painted by `paint_index` from a decoded HxWx3 RGB frame."""
    height, width = rgb.shape[:2]
    block_px = code_block_px(width, height)
    if block_px < MIN_BLOCK_PX:
        raise ValueError(f"frame {width}x{height} too small to carry an index code")
    margin_px = block_px // 4  # block edges bleed under compression: read the centre only
    index = 0
    for bit, y, x in _block_origins(block_px):
        centre = rgb[
            y + margin_px : y + block_px - margin_px, x + margin_px : x + block_px - margin_px
        ]
        if centre.mean() > (WHITE + BLACK) / 2:
            index |= 1 << bit
    return index


def _block_origins(block_px: int) -> Iterator[tuple[int, int, int]]:
    for bit in range(INDEX_BITS):
        row, col = divmod(bit, BITS_PER_ROW)
        yield bit, row * block_px, col * block_px


class _Painter:
    """Makes frame i: background (flat or moving noise) plus the painted index."""

    def __init__(self, width: int, height: int, *, noise: bool, seed: int) -> None:
        self.width, self.height, self.noise = width, height, noise
        if noise:
            rng = np.random.default_rng(seed)
            texture = rng.integers(0, 256, (height // 4 + 2, width // 4 + 2, 3), dtype=np.uint8)
            # 4x4-pixel grains: noisy like real footage, yet a few kB per frame, not raw entropy
            self.texture = np.repeat(np.repeat(texture, 4, axis=0), 4, axis=1)
            self.texture = np.tile(self.texture, (2, 2, 1))

    def frame(self, index: int) -> np.ndarray:
        if self.noise:
            dy, dx = (
                (3 * index) % (self.height // 4 * 4 + 8),
                (5 * index) % (self.width // 4 * 4 + 8),
            )
            rgb = self.texture[dy : dy + self.height, dx : dx + self.width].copy()
        else:
            rgb = np.full((self.height, self.width, 3), BACKGROUND, dtype=np.uint8)
        paint_index(rgb, index)
        return rgb


def _frame_pts(num_frames: int, start_pts: int, vfr: bool, seed: int) -> list[int]:
    if not vfr:
        return [start_pts + i for i in range(num_frames)]
    rng = random.Random(seed)
    pts, next_pts = [], start_pts
    for _ in range(num_frames):
        pts.append(next_pts)
        next_pts += rng.choice((1, 1, 2, 3))  # irregular gaps, still strictly increasing
    return pts


def _codec_options(
    codec: str, gop: int, bframes: int, crf: int | None, b_adapt: bool = True
) -> dict[str, str]:
    # b-adapt=0: every B slot is used; adaptive placement puts almost none in noisy content
    fixed_b = "" if b_adapt else ":b-adapt=0"
    if codec == "libx264":
        params = f"keyint={gop}:min-keyint={gop}:scenecut=0:bframes={bframes}{fixed_b}"
        return {"x264-params": params, "preset": "veryfast", "crf": str(crf or 23)}
    if codec == "libx265":
        params = (f"keyint={gop}:min-keyint={gop}:scenecut=0:bframes={bframes}{fixed_b}"
                  ":log-level=error")
        return {"x265-params": params, "preset": "ultrafast", "crf": str(crf or 28)}
    if codec == "libvpx-vp9":
        return {"deadline": "realtime", "cpu-used": "8", "crf": str(crf or 32), "b": "0"}
    if codec == "libsvtav1":
        return {"preset": "12", "crf": str(crf or 35), "svtav1-params": f"keyint={gop}"}
    if codec == "libaom-av1":
        return {"cpu-used": "8", "usage": "realtime", "crf": str(crf or 35)}
    if codec == "librav1e":
        return {"speed": "10", "qp": str(crf or 100)}
    return {}


def write_test_video(
    path: str | os.PathLike[str],
    *,
    num_frames: int,
    width: int,
    height: int,
    fps: int = 25,
    codec: str = "libx264",
    gop: int = 12,
    pix_fmt: str = "yuv420p",
    bframes: int = 0,
    b_adapt: bool = True,
    crf: int | None = None,
    bitrate: int | None = None,
    noise: bool = False,
    start_pts: int = 0,
    vfr: bool = False,
    rotation: int = 0,
    container_options: dict[str, str] | None = None,
    seed: int = 0,
) -> None:
    """Encodes `num_frames` painted frames with PyAV. The container follows the extension
    (.h264 gives a raw Annex B stream without timestamps). pts are in units of 1/fps, from
    `start_pts`, with irregular gaps when `vfr`. `rotation` (degrees) sets the display matrix.
    `b_adapt=False` makes x264/x265 use all `bframes` B slots (with b-pyramid, some of them
    references), as real footage gets; the adaptive default picks almost none for `noise`.
    `container_options` go to the muxer (e.g. {"movflags": "faststart"}: index before data)."""
    path = os.fspath(path)
    painter = _Painter(width, height, noise=noise, seed=seed)
    container_format = _FORMAT_BY_EXT.get(Path(path).suffix.lower())
    with av.open(path, "w", format=container_format, options=container_options) as container:
        stream = container.add_stream(
            codec, rate=fps, options=_codec_options(codec, gop, bframes, crf, b_adapt)
        )
        stream.width, stream.height, stream.pix_fmt = width, height, pix_fmt
        time_base = Fraction(1, fps)  # the muxer may change stream.time_base on first write
        stream.codec_context.time_base = time_base
        stream.codec_context.gop_size = gop
        stream.codec_context.max_b_frames = bframes
        if bitrate:
            stream.codec_context.bit_rate = bitrate
        if rotation:
            stream.set_display_rotation(rotation)
        for index, pts in enumerate(_frame_pts(num_frames, start_pts, vfr, seed)):
            frame = av.VideoFrame.from_ndarray(painter.frame(index), format="rgb24")
            frame.pts, frame.time_base = pts, time_base
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))


def make_dataset(
    root: str | os.PathLike[str],
    *,
    classes: int | list[str],
    videos_per_class: int,
    num_frames: tuple[int, int] = (20, 60),
    size: tuple[int, int] = (64, 48),
    seed: int = 0,
    ext: str = ".mp4",
    **video_kwargs: object,
) -> list[str]:
    """Writes ROOT/CLASS/CLASS_NNN.EXT videos with a seeded frame count in [min, max] each.
    Returns their paths relative to `root`, sorted. Deterministic for a given seed."""
    class_names = [f"class{i:02d}" for i in range(classes)] if isinstance(classes, int) else classes
    rng = random.Random(seed)
    width, height = size
    rel_paths = []
    for class_name in class_names:
        os.makedirs(os.path.join(root, class_name), exist_ok=True)
        for i in range(videos_per_class):
            rel_path = f"{class_name}/{class_name}_{i:03d}{ext}"
            write_test_video(
                os.path.join(root, rel_path),
                num_frames=rng.randint(*num_frames),
                width=width,
                height=height,
                seed=rng.randrange(1 << 30),
                **video_kwargs,  # type: ignore[arg-type]
            )
            rel_paths.append(rel_path)
    return sorted(rel_paths)

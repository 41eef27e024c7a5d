"""Augmentation ops: shapes, determinism, draw ranges, pixels, crop tracking, validation."""

from __future__ import annotations

import logging
import math

import cv2
import numpy as np
import pytest

from sandfs import ops
from sandfs.ops import FrameShape, OpInstance, OpParamError, OpType, Window

BUILTIN_NAMES = {
    "resize",
    "random_short_side_scale",
    "random_crop",
    "center_crop",
    "random_resized_crop",
    "flip",
    "rotate",
    "color_jitter",
    "grayscale",
    "gaussian_blur",
    "normalize",
    "to_float",
    "inv_sample",
    "temporal_subsample",
}

# one configuration per op (two for resize), used by the shape and determinism tests
CONFIGS = [
    ("resize", {"shape": [64, 80]}),
    ("resize", {"size": 56, "interpolation": "area"}),
    ("random_crop", {"size": [56, 72]}),
    ("center_crop", {"size": 56}),
    ("random_resized_crop", {"size": [48, 64], "interpolation": "bicubic"}),
    ("flip", {"p": 0.5}),
    ("flip", {"direction": "vertical"}),
    ("rotate", {"degrees": 30}),
    ("color_jitter", {"brightness": 0.4, "contrast": 0.4, "saturation": 0.4, "hue": 0.1}),
    ("grayscale", {"p": 0.5}),
    ("gaussian_blur", {"kernel_size": [3, 5]}),
    ("normalize", {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}),
    ("to_float", None),
    ("inv_sample", None),
    ("temporal_subsample", {"num_samples": 3}),
]
INPUT_HW = [(96, 128), (128, 96), (41, 37), (1, 1)]  # landscape, portrait, odd, tiny


def noise(hw: tuple[int, int], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (*hw, 3), dtype=np.uint8)


def gradient(hw: tuple[int, int]) -> np.ndarray:
    """R = x, G = y, B = 7: any output pixel names the source pixel it came from."""
    h, w = hw
    frame = np.full((h, w, 3), 7, np.uint8)
    frame[..., 0] = np.arange(w, dtype=np.uint8)[None, :]
    frame[..., 1] = np.arange(h, dtype=np.uint8)[:, None]
    return frame


def draw(name: str, raw, in_hw: tuple[int, int], seed: int = 0) -> OpInstance:
    return ops.draw_instance(name, ops.validate_op(name, raw), np.random.default_rng(seed), in_hw)


def drawn_values(name: str, raw, in_hw, key: str, seeds=range(300)) -> list:
    return [dict(draw(name, raw, in_hw, seed).drawn)[key] for seed in seeds]


# --- registry ---


def test_registry_lists_the_builtin_steps():
    assert set(ops.op_names()) >= BUILTIN_NAMES
    assert ops.get_op("resize").name == "resize"


def test_unknown_op_names_the_allowed_ones():
    with pytest.raises(KeyError, match=r"unknown op 'zoom'; allowed: .*center_crop.*to_float"):
        ops.get_op("zoom")


class Invert(OpType):
    name = "test_invert"

    def validate(self, raw):
        return {}

    def apply(self, params, drawn, frame):
        return 255 - frame


@pytest.fixture
def fresh_registry(monkeypatch):
    monkeypatch.setattr(ops, "_OPS", dict(ops._OPS))


def test_register_op_adds_a_step_and_rejects_a_duplicate(fresh_registry):
    assert ops.register_op(Invert) is Invert
    out = ops.apply_chain([OpInstance("test_invert", ())], [np.zeros((2, 2, 3), np.uint8)])
    assert out[0].min() == 255
    with pytest.raises(ValueError, match="already registered"):
        ops.register_op(Invert)
    with pytest.raises(TypeError):
        ops.register_op(object)


class FakeEntryPoint:
    def __init__(self, name: str, target) -> None:
        self.name, self.value, self._target = name, f"plugin:{name}", target

    def load(self):
        if isinstance(self._target, Exception):
            raise self._target
        return self._target


def test_entry_point_ops_load_on_first_lookup(fresh_registry, monkeypatch, caplog):
    plugins = [
        FakeEntryPoint("broken", ImportError("no module named plugin")),
        FakeEntryPoint("invert", Invert),
    ]
    monkeypatch.setattr(
        ops, "entry_points", lambda group: plugins if group == ops.ENTRY_POINT_GROUP else []
    )
    monkeypatch.setattr(ops, "_entry_points_loaded", False)
    with caplog.at_level(logging.WARNING, logger="sandfs.ops"):
        assert isinstance(ops.get_op("test_invert"), Invert)
    assert "broken" in caplog.text and "no module named plugin" in caplog.text
    assert "resize" in ops.op_names()


def test_built_in_steps_are_found_without_looking_for_plug_ins(fresh_registry, monkeypatch):
    """Scanning the installed packages' entry points (and importing importlib.metadata) is left
    to the first name that is not built in."""
    scans = []
    monkeypatch.setattr(ops, "entry_points", lambda group: scans.append(group) or [])
    monkeypatch.setattr(ops, "_entry_points_loaded", False)
    ops.validate_op("resize", {"size": 8})
    ops.get_op("flip")
    assert scans == []
    with pytest.raises(KeyError, match=r"unknown op 'cutout'; allowed: .*resize"):
        ops.get_op("cutout")
    assert scans == [ops.ENTRY_POINT_GROUP]


# --- shapes ---


@pytest.mark.parametrize(("name", "raw"), CONFIGS, ids=lambda v: str(v))
@pytest.mark.parametrize("in_hw", INPUT_HW, ids=str)
def test_output_matches_output_shape(name, raw, in_hw):
    params = ops.validate_op(name, raw)
    num_frames = 4
    expected, expected_frames = ops.chain_shape([(name, params)], FrameShape(*in_hw), num_frames)
    for seed in range(3):
        inst = ops.draw_instance(name, params, np.random.default_rng(seed), in_hw)
        out = ops.apply_instance(inst, [noise(in_hw, i) for i in range(num_frames)])
        assert len(out) == expected_frames
        for frame in out:
            assert frame.shape == (expected.height, expected.width, 3)
            assert frame.dtype == np.dtype(expected.dtype)
            assert frame.flags.c_contiguous


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("resize", {"shape": [20, 30]}),
        ("random_crop", {"size": 8}),
        ("center_crop", {"size": 50}),
        ("random_resized_crop", {"size": 16}),
        ("flip", {}),
        ("rotate", {"degrees": 45}),
        ("grayscale", {}),
        ("gaussian_blur", {"kernel_size": 3}),
        ("normalize", {"mean": [0.5] * 3, "std": [0.5] * 3}),
        ("to_float", None),
    ],
    ids=lambda v: str(v),
)
def test_float32_input_keeps_float32(name, raw):
    frame = noise((40, 30)).astype(np.float32) / 255
    params = ops.validate_op(name, raw)
    expected, _ = ops.chain_shape([(name, params)], FrameShape(40, 30, "float32"), 1)
    out = ops.apply_instance(draw(name, raw, (40, 30)), [frame])[0]
    assert out.dtype == np.float32 and expected.dtype == "float32"
    assert out.shape == (expected.height, expected.width, 3)
    if name != "normalize":
        assert out.min() >= 0.0 and out.max() <= 1.0


def test_static_shape_with_unknown_input():
    params = ops.validate_op("resize", {"size": 112})
    assert ops.chain_shape([("resize", params)], FrameShape(None, None), 8) == (
        FrameShape(None, None),
        8,
    )
    crop = ops.validate_op("random_crop", {"size": [100, 120]})
    assert ops.chain_shape(
        [("resize", params), ("random_crop", crop)], FrameShape(None, None), 8
    ) == (FrameShape(100, 120), 8)


@pytest.mark.parametrize(
    ("in_hw", "out_hw"),
    [((240, 320), (112, 149)), ((320, 240), (149, 112)), ((100, 100), (112, 112))],
)
def test_resize_size_sets_the_smaller_edge_like_torchvision(in_hw, out_hw):
    out = ops.apply_instance(draw("resize", {"size": 112}, in_hw), [noise(in_hw)])[0]
    assert out.shape[:2] == out_hw


def test_color_jitter_after_normalize_is_a_shape_error():
    chain = [
        ("normalize", ops.validate_op("normalize", {"mean": [0] * 3, "std": [1] * 3})),
        ("color_jitter", ops.validate_op("color_jitter", {"brightness": 0.2})),
    ]
    with pytest.raises(OpParamError, match="uint8"):
        ops.chain_shape(chain, FrameShape(10, 10), 4)


# --- random_short_side_scale (PySlowFast's random_short_side_scale_jitter) ---


def test_short_side_scale_draws_sizes_over_the_whole_range_per_clip():
    sizes = drawn_values("random_short_side_scale", {"min_size": 32, "max_size": 40},
                         (48, 64), "size")
    assert min(sizes) == 32 and max(sizes) == 40 and set(sizes) == set(range(32, 41))
    again = drawn_values("random_short_side_scale", {"min_size": 32, "max_size": 40},
                         (48, 64), "size")
    assert sizes == again  # the seed decides


@pytest.mark.parametrize(("in_hw", "size", "out_hw"), [
    ((48, 64), 40, (40, 53)),  # PySlowFast: new_w = floor(w / h * size)
    ((64, 48), 40, (53, 40)),
    ((240, 320), 256, (256, 341)),
    ((50, 50), 50, (50, 50)),
])
def test_short_side_scale_keeps_the_aspect_like_pyslowfast(in_hw, size, out_hw):
    op = ops.get_op("random_short_side_scale")
    params = ops.validate_op("random_short_side_scale", {"min_size": size, "max_size": size})
    inst = ops.draw_instance("random_short_side_scale", params, np.random.default_rng(0), in_hw)
    assert dict(inst.drawn)["size"] == size
    out = ops.apply_instance(inst, [noise(in_hw)])[0]
    assert out.shape == (*out_hw, 3) and out.flags.c_contiguous
    assert op.out_hw(size, in_hw) == out_hw


def test_short_side_scale_then_a_crop_has_a_static_shape():
    jitter = ops.validate_op("random_short_side_scale", {"min_size": 256, "max_size": 320})
    crop = ops.validate_op("random_crop", {"size": 224})
    assert ops.chain_shape([("random_short_side_scale", jitter)], FrameShape(240, 320),
                           8) == (FrameShape(None, None), 8)
    assert ops.chain_shape([("random_short_side_scale", jitter), ("random_crop", crop)],
                           FrameShape(240, 320), 8) == (FrameShape(224, 224), 8)


@pytest.mark.parametrize(("raw", "key", "message"), [
    ({"min_size": 320, "max_size": 256}, "max_size", "at least min_size"),
    ({"min_size": 0, "max_size": 256}, "min_size", "positive int"),
    ({"min_size": 256}, "max_size", "needs 'max_size'"),
    ({"min_size": 1, "max_size": 2, "scale": 3}, "scale", "no parameter 'scale'"),
])
def test_short_side_scale_refuses_bad_parameters(raw, key, message):
    with pytest.raises(OpParamError, match=message) as info:
        ops.validate_op("random_short_side_scale", raw)
    assert info.value.key == key


# --- determinism ---


@pytest.mark.parametrize(("name", "raw"), CONFIGS, ids=lambda v: str(v))
def test_same_seed_same_bytes_and_input_untouched(name, raw):
    clip = [noise((60, 70), i) for i in range(3)]
    before = [f.copy() for f in clip]
    first = draw(name, raw, (60, 70), seed=11)
    second = draw(name, raw, (60, 70), seed=11)
    assert first == second and hash(first) == hash(second)
    out_a, out_b = ops.apply_instance(first, clip), ops.apply_instance(second, clip)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(out_a, out_b, strict=True))
    assert all(np.array_equal(f, b) for f, b in zip(clip, before, strict=True))


RANDOM_NAMES = {
    "random_crop",
    "random_resized_crop",
    "rotate",
    "color_jitter",
    "grayscale",
    "gaussian_blur",
}
RANDOM_CONFIGS = [c for c in CONFIGS if c[0] in RANDOM_NAMES]


@pytest.mark.parametrize(("name", "raw"), [*RANDOM_CONFIGS, ("flip", {"p": 0.5})], ids=str)
def test_random_ops_draw_differently_across_seeds(name, raw):
    assert ops.get_op(name).random
    assert len({draw(name, raw, (60, 70), seed).drawn for seed in range(20)}) > 1


def test_drawn_values_are_plain_python():
    inst = draw("color_jitter", {"brightness": 0.5, "hue": 0.2}, (10, 10))
    for _, value in (*inst.drawn, *draw("random_crop", {"size": 4}, (10, 10)).drawn):
        assert type(value) in (int, float, bool, str, tuple)


# --- crops ---


def test_random_crop_origin_spans_the_whole_range():
    xs = drawn_values("random_crop", {"size": [30, 30]}, (40, 50), "x", range(400))
    ys = drawn_values("random_crop", {"size": [30, 30]}, (40, 50), "y", range(400))
    assert set(xs) == set(range(21)) and set(ys) == set(range(11))


def test_random_crop_takes_the_drawn_region():
    frame = noise((40, 50))
    inst = draw("random_crop", {"size": [30, 20]}, (40, 50), seed=5)
    x, y = dict(inst.drawn)["x"], dict(inst.drawn)["y"]
    assert np.array_equal(ops.apply_instance(inst, [frame])[0], frame[y : y + 30, x : x + 20])


def test_center_crop_uses_torchvision_rounding():
    frame = noise((256, 341))
    out = ops.apply_instance(draw("center_crop", {"size": 224}, (256, 341)), [frame])[0]
    assert np.array_equal(out, frame[16:240, 58:282])  # round(117 / 2) = 58 (half to even)


def test_small_input_is_upscaled_to_cover_the_crop():
    frame = gradient((50, 100))
    xs = drawn_values("random_crop", {"size": 112}, (50, 100), "x", range(1500))
    assert set(xs) == set(range(224 - 112 + 1))  # upscaled 2.24x to 112 x 224
    out = ops.apply_instance(draw("center_crop", {"size": 112}, (50, 100)), [frame])[0]
    assert out.shape == (112, 112, 3)
    assert out[..., 1].min() == 0 and out[..., 1].max() == 49  # full height kept
    assert 24 <= out[..., 0].min() <= 26 and 73 <= out[..., 0].max() <= 75  # central half


def test_random_resized_crop_follows_torchvision_sampling():
    in_h, in_w = 240, 320
    scale, ratio = (0.08, 1.0), (3 / 4, 4 / 3)
    fractions = []
    for seed in range(300):
        box = dict(draw("random_resized_crop", {"size": 112}, (in_h, in_w), seed).drawn)
        x, y, w, h = box["x"], box["y"], box["w"], box["h"]
        assert 0 <= x <= in_w - w and 0 <= y <= in_h - h
        # w and h are rounded from the drawn area and aspect: allow half a pixel each way
        assert (w - 0.5) * (h - 0.5) <= scale[1] * in_h * in_w
        assert (w + 0.5) * (h + 0.5) >= scale[0] * in_h * in_w
        assert (w - 0.5) / (h + 0.5) <= ratio[1] and (w + 0.5) / (h - 0.5) >= ratio[0]
        fractions.append(w * h / (in_h * in_w))
    assert min(fractions) < 0.15 and max(fractions) > 0.85


def test_random_resized_crop_falls_back_to_a_central_crop():
    # every attempt needs h >= 82 > 10 rows: torchvision's fallback clamps the ratio to 4/3
    raw = {"size": 16, "scale": [0.9, 1.0]}
    for seed in range(5):
        assert dict(draw("random_resized_crop", raw, (10, 1000), seed).drawn) == {
            "x": 493,
            "y": 0,
            "w": 13,
            "h": 10,
        }
    assert dict(draw("random_resized_crop", raw, (1000, 10), 0).drawn) == {
        "x": 0,
        "y": 493,
        "w": 10,
        "h": 13,
    }


def test_random_resized_crop_resizes_the_drawn_region():
    frame = noise((60, 80))
    inst = draw("random_resized_crop", {"size": [20, 30]}, (60, 80), seed=3)
    d = dict(inst.drawn)
    expected = cv2.resize(
        np.ascontiguousarray(frame[d["y"] : d["y"] + d["h"], d["x"] : d["x"] + d["w"]]), (30, 20)
    )
    assert np.array_equal(ops.apply_instance(inst, [frame])[0], expected)


# --- flip, rotate ---


def test_flip_directions_and_probability():
    frame = noise((5, 7))
    assert draw("flip", None, (5, 7)).drawn == ()  # p = 1: nothing drawn, always flipped
    assert np.array_equal(
        ops.apply_instance(draw("flip", None, (5, 7)), [frame])[0], frame[:, ::-1]
    )
    vertical = draw("flip", {"direction": "vertical"}, (5, 7))
    assert np.array_equal(ops.apply_instance(vertical, [frame])[0], frame[::-1])
    never = draw("flip", {"p": 0}, (5, 7))
    assert np.array_equal(ops.apply_instance(never, [frame])[0], frame)
    flips = drawn_values("flip", {"p": 0.5}, (5, 7), "apply", range(1000))
    assert 430 <= sum(flips) <= 570  # Binomial(1000, 0.5): 4.4 standard deviations


def test_flip_applies_to_every_frame_of_a_clip_alike():
    clip = [noise((5, 7), i) for i in range(4)]
    for seed in range(10):
        inst = draw("flip", {"p": 0.5}, (5, 7), seed)
        out = ops.apply_instance(inst, clip)
        flipped = [np.array_equal(o, f[:, ::-1]) for o, f in zip(out, clip, strict=True)]
        assert flipped == [dict(inst.drawn)["apply"]] * 4


def test_rotate_by_90_degrees_is_counter_clockwise():
    frame = noise((9, 9))
    out = ops.apply_instance(draw("rotate", {"degrees": [90, 90]}, (9, 9)), [frame])[0]
    assert np.array_equal(out, np.rot90(frame))


def test_rotate_keeps_the_size_and_fills_with_zero():
    frame = np.full((30, 40, 3), 200, np.uint8)
    out = ops.apply_instance(draw("rotate", {"degrees": [45, 45]}, (30, 40)), [frame])[0]
    assert out.shape == frame.shape
    assert out[0, 0].tolist() == [0, 0, 0] and out[15, 20].tolist() == [200, 200, 200]
    angles = drawn_values("rotate", {"degrees": 10}, (30, 40), "angle")
    assert -10 <= min(angles) < -9 and 9 < max(angles) <= 10


# --- color ---


def test_color_jitter_draws_factors_in_torchvision_ranges_and_random_order():
    raw = {"brightness": 0.4, "contrast": [0.5, 0.8], "saturation": 2, "hue": 0.1}
    expected = {
        "brightness": (0.6, 1.4),
        "contrast": (0.5, 0.8),
        "saturation": (0.0, 3.0),
        "hue": (-0.1, 0.1),
    }
    draws = [dict(draw("color_jitter", raw, (8, 8), seed).drawn) for seed in range(400)]
    for key, (low, high) in expected.items():
        values = [d[key] for d in draws]
        assert low <= min(values) < low + 0.05 * (high - low)
        assert high - 0.05 * (high - low) < max(values) <= high
    assert len({d["order"] for d in draws}) == 24  # every order of the four
    only_hue = dict(draw("color_jitter", {"hue": 0.2}, (8, 8)).drawn)
    assert set(only_hue) == {"order", "hue"} and only_hue["order"] == ("hue",)


def jitter(frame: np.ndarray, **factors: float) -> np.ndarray:
    params = ops.validate_op("color_jitter", {"brightness": 0.5})
    inst = OpInstance("color_jitter", params, (("order", tuple(factors)), *factors.items()))
    return ops.apply_instance(inst, [frame])[0]


def test_color_jitter_pixel_semantics():
    frame = noise((16, 16))
    brighter = jitter(frame, brightness=1.3)
    # torchvision: float32 product, clamped, truncated to uint8
    expected = np.clip(frame.astype(np.float32) * np.float32(1.3), 0, 255).astype(np.uint8)
    assert brighter.dtype == np.uint8 and np.array_equal(brighter, expected)
    flat = jitter(frame, contrast=0.0)  # contrast 0: the mean gray everywhere
    gray_mean = (frame.astype(np.float64) @ [0.2989, 0.587, 0.114]).mean()
    assert np.abs(flat.astype(float) - gray_mean).max() <= 1
    gray = jitter(frame, saturation=0.0)
    assert np.array_equal(gray[..., 0], gray[..., 1]) and np.array_equal(gray[..., 1], gray[..., 2])
    red = np.zeros((4, 4, 3), np.uint8)
    red[..., 0] = 255
    # uint8 HSV holds the hue to 1.4 degrees: a few levels off pure green / cyan / yellow
    for hue, rgb in ((1 / 3, [0, 255, 0]), (-0.5, [0, 255, 255]), (1 / 6, [255, 255, 0])):
        assert np.abs(jitter(red, hue=hue)[0, 0].astype(int) - rgb).max() <= 4, hue
    unchanged = jitter(frame, hue=0.0).astype(int) - frame
    assert np.abs(unchanged).max() <= 5 and np.abs(unchanged).mean() < 0.5


def test_grayscale_keeps_three_equal_channels():
    frame = noise((10, 12))
    out = ops.apply_instance(draw("grayscale", None, (10, 12)), [frame])[0]
    assert out.shape == (10, 12, 3)
    assert np.array_equal(out[..., 0], out[..., 2])
    expected = frame.astype(np.float64) @ [0.299, 0.587, 0.114]
    assert np.abs(out[..., 0] - expected).max() <= 1
    applied = drawn_values("grayscale", {"p": 0.2}, (10, 12), "apply", range(1000))
    assert 150 <= sum(applied) <= 250  # Binomial(1000, 0.2): 4 standard deviations


def test_gaussian_blur_kernel_is_h_by_w_and_sigma_is_drawn():
    impulse = np.zeros((21, 21, 3), np.float32)
    impulse[10, 10] = 1.0
    out = ops.apply_instance(
        draw("gaussian_blur", {"kernel_size": [3, 7], "sigma": 5}, (21, 21)), [impulse]
    )[0]
    rows, cols = np.nonzero(out[..., 0])
    assert (rows.min(), rows.max(), cols.min(), cols.max()) == (9, 11, 7, 13)
    assert math.isclose(float(out[..., 0].sum()), 1.0, rel_tol=1e-5)
    flat = np.full((9, 9, 3), 77, np.uint8)
    assert np.array_equal(
        ops.apply_instance(draw("gaussian_blur", {"kernel_size": 5}, (9, 9)), [flat])[0], flat
    )
    sigmas = drawn_values("gaussian_blur", {"kernel_size": 3}, (9, 9), "sigma")
    assert 0.1 <= min(sigmas) < 0.2 and 1.9 < max(sigmas) <= 2.0


def test_normalize_and_to_float_values():
    frame = noise((6, 7))
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    unit = frame.astype(np.float32) / np.float32(255)
    expected = (unit - np.float32(mean)) / np.float32(std)
    normalize = draw("normalize", {"mean": mean, "std": std}, (6, 7))
    assert np.array_equal(ops.apply_instance(normalize, [frame])[0], expected)
    to_float = draw("to_float", None, (6, 7))
    assert np.array_equal(ops.apply_instance(to_float, [frame])[0], unit)
    chained = ops.apply_chain([to_float, normalize], [frame])[0]
    assert np.array_equal(chained, expected)  # float input is not divided by 255 again


# --- temporal ---


@pytest.mark.parametrize(
    ("num_frames", "num_samples", "indices"),
    [
        (10, 4, (0, 3, 6, 9)),
        (8, 3, (0, 3, 7)),
        (16, 8, (0, 2, 4, 6, 8, 10, 12, 15)),
        (3, 15, (0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 2)),
        (5, 1, (0,)),
        (1, 3, (0, 0, 0)),
    ],
)
def test_temporal_subsample_picks_floor_of_linspace(num_frames, num_samples, indices):
    clip = [np.full((2, 2, 3), i, np.uint8) for i in range(num_frames)]
    inst = draw("temporal_subsample", {"num_samples": num_samples}, (2, 2))
    out = ops.apply_instance(inst, clip)
    assert tuple(int(f[0, 0, 0]) for f in out) == indices


def test_inv_sample_reverses_and_track_frames_follows():
    clip = [np.full((2, 2, 3), i, np.uint8) for i in range(5)]
    inv = draw("inv_sample", None, (2, 2))
    assert [int(f[0, 0, 0]) for f in ops.apply_instance(inv, clip)] == [4, 3, 2, 1, 0]
    sub = draw("temporal_subsample", {"num_samples": 3}, (2, 2))
    assert ops.track_frames([sub, inv], [100, 102, 104, 106, 108]) == (108, 104, 100)


# --- crop tracking ---

SOURCE_HW = (60, 80)  # gradient source, resized 2x (nearest: exact) before every crop


def track(instances: list[OpInstance]) -> tuple[list[int] | None, Window, np.ndarray]:
    window = ops.track_chain(instances, Window(0.0, 0.0, 80.0, 60.0), SOURCE_HW)
    out = ops.apply_chain(instances, [gradient(SOURCE_HW)])[0]
    return ops.crop_box(window), window, out


def resize_2x() -> OpInstance:
    return draw("resize", {"shape": [120, 160], "interpolation": "nearest"}, SOURCE_HW)


def crop_at(x: int, y: int) -> OpInstance:
    return OpInstance(
        "random_crop", ops.validate_op("random_crop", {"size": [50, 70]}), (("x", x), ("y", y))
    )


def pixel_box(out: np.ndarray) -> list[int]:
    """[x, y, w, h] of the source pixels seen in a gradient image's crop."""
    xs, ys = out[..., 0], out[..., 1]
    return [
        int(xs.min()),
        int(ys.min()),
        int(xs.max() - xs.min()) + 1,
        int(ys.max() - ys.min()) + 1,
    ]


def test_resize_crop_flip_reports_the_source_box():
    box, window, out = track([resize_2x(), crop_at(20, 14), draw("flip", None, (50, 70))])
    assert box == [10, 7, 35, 25] == pixel_box(out)
    assert window.flipped and out[0, 0, 0] == 44  # mirrored: the left column is source x 44


def test_flip_before_crop_maps_x_through_the_flip():
    flip = draw("flip", None, (120, 160))
    box, window, out = track([resize_2x(), flip, crop_at(20, 14)])
    assert box == [35, 7, 35, 25] == pixel_box(out)
    vflip = draw("flip", {"direction": "vertical"}, (120, 160))
    box, window, out = track([resize_2x(), vflip, crop_at(20, 14)])
    assert box == [10, 28, 35, 25] == pixel_box(out)
    assert window.vflipped and not window.flipped


@pytest.mark.parametrize("seed", range(8))
def test_random_crops_track_within_a_pixel(seed):
    # output 120 x 160 >= any region of the 2x image: nearest upsampling shows every pixel
    rrc = draw(
        "random_resized_crop", {"size": [120, 160], "interpolation": "nearest"}, (120, 160), seed
    )
    for chain in (
        [
            resize_2x(),
            draw("flip", {"p": 0.5}, (120, 160), seed),
            draw("random_crop", {"size": [50, 70]}, (120, 160), seed),
        ],
        [resize_2x(), rrc],
    ):
        box, _, out = track(chain)
        assert np.abs(np.subtract(box, pixel_box(out))).max() <= 1


def test_upscaled_small_input_tracks_in_source_pixels():
    source = gradient((50, 100))
    inst = draw("random_crop", {"size": 112}, (50, 100), seed=4)
    window = ops.track_chain([inst], Window(0.0, 0.0, 100.0, 50.0), (50, 100))
    box = ops.crop_box(window)
    out = ops.apply_instance(inst, [source])[0]
    assert box[1:] == [0, 50, 50]  # a 112 crop of the 2.24x image: 50 source pixels
    assert np.abs(np.subtract(box, pixel_box(out))).max() <= 1


def test_no_crop_means_no_box_and_rotate_keeps_the_window():
    box, window, _ = track([resize_2x(), draw("flip", None, (120, 160))])
    assert box is None and window.flipped
    rotated = [resize_2x(), draw("rotate", {"degrees": 20}, (120, 160)), crop_at(20, 14)]
    assert track(rotated)[0] == [10, 7, 35, 25]


# --- parameters ---


def test_defaults_are_filled_in_and_equivalent_spellings_agree():
    assert ops.validate_op("flip", None) == ops.validate_op(
        "flip", {"direction": "horizontal", "p": 1.0}
    )
    assert ops.validate_op("resize", {"size": [10, 20]}) == ops.validate_op(
        "resize", {"shape": [10, 20]}
    )
    assert ops.validate_op("color_jitter", {"brightness": 0}) == ops.validate_op(
        "color_jitter", {"brightness": [1, 1]}
    )
    rrc = dict(ops.validate_op("random_resized_crop", {"size": 224}))
    assert rrc == {
        "size": (224, 224),
        "scale": (0.08, 1.0),
        "ratio": (0.75, 4 / 3),
        "interpolation": "bilinear",
    }
    hash(ops.validate_op("normalize", {"mean": [0.5] * 3, "std": [0.5] * 3}))


@pytest.mark.parametrize(
    ("name", "raw", "key"),
    [
        ("resize", {}, "shape"),
        ("resize", {"shape": [224, 224], "size": 224}, "shape"),
        ("resize", {"shape": [0, 10]}, "shape"),
        ("resize", {"size": -1}, "size"),
        ("resize", {"shape": [10, 10], "interpolation": "lanczos"}, "interpolation"),
        ("resize", {"shape": [10, 10], "antialias": True}, "antialias"),
        ("random_crop", {}, "size"),
        ("random_crop", {"size": -5}, "size"),
        ("random_crop", {"size": [224]}, "size"),
        ("random_crop", {"size": 22.5}, "size"),
        ("random_crop", {"size": True}, "size"),
        ("random_crop", {"size": 10, "padding": 4}, "padding"),
        ("center_crop", {"size": [0, 3]}, "size"),
        ("random_resized_crop", {"size": 8, "scale": [0.5, 0.1]}, "scale"),
        ("random_resized_crop", {"size": 8, "scale": [0, 1]}, "scale"),
        ("random_resized_crop", {"size": 8, "scale": [0.5, 1.5]}, "scale"),
        ("random_resized_crop", {"size": 8, "ratio": [2, 1]}, "ratio"),
        ("random_resized_crop", {"size": 8, "ratio": 1.0}, "ratio"),
        ("flip", {"p": 1.5}, "p"),
        ("flip", {"p": -0.1}, "p"),
        ("flip", {"p": "0.5"}, "p"),
        ("flip", {"direction": "diagonal"}, "direction"),
        ("rotate", {}, "degrees"),
        ("rotate", {"degrees": -5}, "degrees"),
        ("rotate", {"degrees": [10, -10]}, "degrees"),
        ("color_jitter", {"brightness": -0.1}, "brightness"),
        ("color_jitter", {"contrast": "a"}, "contrast"),
        ("color_jitter", {"saturation": [1.5, 0.5]}, "saturation"),
        ("color_jitter", {"hue": 0.6}, "hue"),
        ("color_jitter", {"hue": [-0.6, 0.1]}, "hue"),
        ("grayscale", {"p": 2}, "p"),
        ("grayscale", {"num_output_channels": 1}, "num_output_channels"),
        ("gaussian_blur", {}, "kernel_size"),
        ("gaussian_blur", {"kernel_size": 4}, "kernel_size"),
        ("gaussian_blur", {"kernel_size": [3, 4]}, "kernel_size"),
        ("gaussian_blur", {"kernel_size": 0}, "kernel_size"),
        ("gaussian_blur", {"kernel_size": 3, "sigma": 0}, "sigma"),
        ("gaussian_blur", {"kernel_size": 3, "sigma": [0, 1]}, "sigma"),
        ("gaussian_blur", {"kernel_size": 3, "sigma": [2, 1]}, "sigma"),
        ("normalize", {"mean": [0.5, 0.5], "std": [1, 1, 1]}, "mean"),
        ("normalize", {"mean": [0.5] * 3, "std": [0.2, 0.2, 0]}, "std"),
        ("normalize", {"mean": [0.5] * 3, "std": [1, 1, -1]}, "std"),
        ("normalize", {"std": [1, 1, 1]}, "mean"),
        ("to_float", {"scale": 255}, "scale"),
        ("inv_sample", {"reverse": True}, "reverse"),
        ("temporal_subsample", {"num_samples": 0}, "num_samples"),
        ("temporal_subsample", {"num_samples": 2.5}, "num_samples"),
    ],
    ids=lambda v: str(v),
)
def test_bad_parameters_name_the_key(name, raw, key):
    with pytest.raises(OpParamError) as excinfo:
        ops.validate_op(name, raw)
    assert excinfo.value.key == key
    assert key in excinfo.value.message


def test_unknown_parameter_lists_the_allowed_ones():
    with pytest.raises(OpParamError, match="allowed: size, scale, ratio, interpolation"):
        ops.validate_op("random_resized_crop", {"size": 8, "sizes": 9})


def test_parameters_must_be_a_mapping():
    with pytest.raises(OpParamError, match="mapping") as excinfo:
        ops.validate_op("flip", [1, 2])
    assert excinfo.value.key == ""

"""Absolute and relative depth: objects of known real size standing on a ground plane seen by a pinhole camera.

The camera (documented so every pixel can be checked by hand):
- pinhole, square image of S px, horizontal and vertical field of view 60 degrees, so the focal length is
  f = (S / 2) / tan(30 deg) = 0.866 S px; optical axis horizontal (no pitch or roll);
- principal point at column S/2 and at row ``cy`` = the horizon: 0.25 S indoors, 0.35 S outdoors;
- camera height above the floor h = 0.8 m indoors, 4.0 m outdoors (a camera on a mast), so the nearest bin
  edge (1 m, 8 m) still has its ground contact inside the image.
An object whose closest (front) face is at depth Z (metres along the optical axis, as a depth map gives it)
touches the ground at row v = cy + f h / Z and is f H / Z px tall and f W / Z px wide for its real height H
and width W. Distance in the question is this Z. The floor carries tiles (0.5 m indoors, 2 m outdoors)
whose rows follow the same projection, a second depth cue besides size and ground contact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from PIL import Image, ImageDraw

from ava.abilities import INDOOR_DEPTH_BINS, OUTDOOR_DEPTH_BINS, REL_DEPTH_ANSWERS
from ava.synth.abilities import ask, option_truth
from ava.synth.core import BLUE, RED, Ctx, Rendered
from ava.synth.shapes import add_noise, draw_box, draw_icon, gradient, overlaps, random_color, shade

FOV_DEG = 60.0
# Real sizes (width, height) in metres of the objects each scene type holds.
INDOOR_OBJECTS = {"chair": (0.5, 0.9), "table": (1.2, 0.75), "lamp": (0.45, 1.5), "cabinet": (0.8, 1.8)}
OUTDOOR_OBJECTS = {"person": (0.5, 1.75), "car": (4.2, 1.5), "tree": (3.0, 5.0), "pine": (2.5, 6.0)}


@dataclass(frozen=True)
class Camera:
    size: int
    height_m: float
    horizon_frac: float

    @property
    def f(self) -> float:
        return (self.size / 2) / math.tan(math.radians(FOV_DEG / 2))

    @property
    def cy(self) -> float:
        return self.horizon_frac * self.size

    def ground_row(self, z: float) -> float:
        return self.cy + self.f * self.height_m / z

    def column(self, x: float, z: float) -> float:
        return self.size / 2 + self.f * x / z

    def box(self, x: float, z: float, w: float, h: float) -> tuple[float, float, float, float]:
        """Pixel box of a w x h m billboard centred at lateral offset x m, front face at depth z m."""
        u, v = self.column(x, z), self.ground_row(z)
        half, tall = self.f * w / z / 2, self.f * h / z
        return (u - half, v - tall, u + half, v)


def camera_for(scene: str, size: int) -> Camera:
    return Camera(size, 0.8, 0.25) if scene == "indoor" else Camera(size, 4.0, 0.35)


def objects_for(scene: str) -> dict[str, tuple[float, float]]:
    return INDOOR_OBJECTS if scene == "indoor" else OUTDOOR_OBJECTS


def draw_ground(ctx: Ctx, cam: Camera, scene: str) -> Image.Image:
    """Wall or sky above the horizon, a tiled floor or ground below, projected by ``cam``."""
    s = cam.size
    if scene == "indoor":
        image = Image.new("RGB", (s, s), shade(random_color(ctx, 120, 220), 1.3))
        floor, tile, far = shade(random_color(ctx, 80, 200), 0.9), 0.5, 9.0
    else:
        image = gradient((s, s), (110, 160, 225), (200, 220, 240))
        floor, tile, far = (ctx.randint(90, 140), ctx.randint(120, 160), ctx.randint(70, 100)), 2.0, 200.0
    draw = ImageDraw.Draw(image)
    top = cam.ground_row(far)
    draw.rectangle([0, top, s, s], fill=floor)
    line = shade(floor, 0.75)
    width = max(1, round(s / 256))
    phase = ctx.uniform(0, tile)
    z = 1.0 if scene == "indoor" else 6.0
    z += phase
    while z < far:  # rows of constant depth
        draw.line([(0, cam.ground_row(z)), (s, cam.ground_row(z))], fill=line, width=width)
        z += tile
    x = -40 * tile + phase
    while x < 40 * tile:  # lines of constant lateral offset converge at the vanishing point
        draw.line([(cam.column(x, far), top), (cam.column(x, 0.5), cam.ground_row(0.5))], fill=line, width=width)
        x += tile
    return image


def place_lateral(ctx: Ctx, cam: Camera, z: float, w: float, lo: float = 0.05, hi: float = 0.95) -> float:
    """A lateral offset (m) putting an object's centre column uniformly within [lo, hi] of the image width."""
    u = ctx.uniform(lo, hi) * cam.size
    return (u - cam.size / 2) * z / cam.f


def draw_object(image: Image.Image, name: str, box: tuple[float, float, float, float], color) -> None:
    draw_icon(ImageDraw.Draw(image), name, box, color)


def _scene_meta(scene: str, cam: Camera) -> dict:
    return {
        "scene_type": scene,
        "camera": {"fov_deg": FOV_DEG, "height_m": cam.height_m, "horizon_row": round(cam.cy, 1)},
    }


def _depth_range(scene: str) -> tuple[float, float]:
    return (1.0, 7.0) if scene == "indoor" else (8.0, 31.0)


def _clutter(ctx: Ctx, cam: Camera, scene: str, avoid: list, zs: list[float]) -> list[tuple[float, str, tuple]]:
    """Distractor objects (no box) at other depths, not overlapping the boxed ones."""
    out = []
    lo, hi = _depth_range(scene)
    objects = objects_for(scene)
    for _ in range(ctx.n_clutter(0, 2)):
        name = ctx.choice(list(objects))
        z = ctx.uniform(lo, hi + 6)
        w, h = objects[name]
        box = cam.box(place_lateral(ctx, cam, z, w), z, w, h)
        if not any(overlaps(box, a, 4) for a in avoid):
            out.append((z, name, box))
            avoid.append(box)
    return out


def render_abs_depth(ctx: Ctx) -> Rendered:
    bins = [*INDOOR_DEPTH_BINS, *OUTDOOR_DEPTH_BINS]
    (b,) = ctx.balanced(len(bins))  # balanced per bin, as the paper's curation
    scene = "indoor" if b < len(INDOOR_DEPTH_BINS) else "outdoor"
    options = list(INDOOR_DEPTH_BINS if scene == "indoor" else OUTDOOR_DEPTH_BINS)
    index = options.index(bins[b])
    lo, hi = (float(v) for v in bins[b].split("-"))
    z = ctx.uniform(lo + 0.02, hi - 0.02)
    cam = camera_for(scene, ctx.size)
    objects = objects_for(scene)
    name = ctx.choice(list(objects))
    w, h = objects[name]
    box = cam.box(place_lateral(ctx, cam, z, w, 0.2, 0.8), z, w, h)
    image = draw_ground(ctx, cam, scene)
    layers = [*_clutter(ctx, cam, scene, [box], [z]), (z, name, box)]
    for _, n, bb in sorted(layers, key=lambda t: -t[0]):  # far to near
        draw_object(image, n, bb, random_color(ctx))
    image = add_noise(ctx, image)
    draw_box(image, box, RED)
    return Rendered(
        image=image,
        question=ask("abs_depth", options, object=name),
        answer=options[index],
        truth={"index": index, "bin": [lo, hi]},
        options=options,
        meta={"class": name, **_scene_meta(scene, cam), "depth_m": round(z, 3), "object_px": round(box[3] - box[1], 1)},
    )


# Relative depth: the farther object is at least this many times as far as the nearer one (and always >= 0.5 m
# farther, the paper's rule). At the demo's size a 1.25x ratio, with objects of different classes, left every
# extractor at chance; at 2x the nearer object stands clearly lower and, on easy, where both objects are of one
# class, looks at least twice as large (benchmarks/bench_synth_signal.py).
MIN_RATIO = {"easy": 2.0, "medium": 1.4, "hard": 1.0}


def _two_depths(ctx: Ctx, scene: str) -> tuple[float, float]:
    """(near, far) with far >= near * ratio and far - near >= 0.5 m, the ratio set by the difficulty."""
    lo, hi = _depth_range(scene)
    for _ in range(100):
        near = ctx.uniform(lo, hi - 0.5)
        gap = max(0.5, (MIN_RATIO[ctx.difficulty] - 1) * near)
        if near + gap <= hi:
            return near, ctx.uniform(near + gap, hi)
    return lo, hi


def render_rel_depth(ctx: Ctx) -> Rendered:
    classes = [("indoor", n) for n in INDOOR_OBJECTS] + [("outdoor", n) for n in OUTDOOR_OBJECTS]
    k, ans = ctx.balanced(len(classes), 2)  # each class equally often nearer and farther
    scene, red_name = classes[k]
    objects = objects_for(scene)
    # easy: both objects of one class, so relative size is a pure depth cue; otherwise any class of the scene
    blue_name = red_name if ctx.difficulty == "easy" else ctx.choice(list(objects))
    near, far = _two_depths(ctx, scene)
    z_red, z_blue = (near, far) if ans == 0 else (far, near)
    cam = camera_for(scene, ctx.size)
    red_left = ctx.rng.random() < 0.5
    for _ in range(20):  # keep the two boxes apart when the objects allow it
        rb = cam.box(
            place_lateral(ctx, cam, z_red, 0, *((0.08, 0.45) if red_left else (0.55, 0.92))), z_red, *objects[red_name]
        )
        bb = cam.box(
            place_lateral(ctx, cam, z_blue, 0, *((0.55, 0.92) if red_left else (0.08, 0.45))),
            z_blue,
            *objects[blue_name],
        )
        if not overlaps(rb, bb, 6):
            break
    image = draw_ground(ctx, cam, scene)
    layers = [*_clutter(ctx, cam, scene, [rb, bb], [z_red, z_blue]), (z_red, red_name, rb), (z_blue, blue_name, bb)]
    for _, n, box in sorted(layers, key=lambda t: -t[0]):
        draw_object(image, n, box, random_color(ctx))
    image = add_noise(ctx, image)
    draw_box(image, rb, RED)
    draw_box(image, bb, BLUE)
    options = list(REL_DEPTH_ANSWERS)
    return Rendered(
        image=image,
        question=ask("rel_depth", options, a=red_name, b=blue_name),
        answer=options[ans],
        truth=option_truth(options, ans),
        options=options,
        meta={
            "class": red_name,
            **_scene_meta(scene, cam),
            "depth_red_m": round(z_red, 3),
            "depth_blue_m": round(z_blue, 3),
            "depth_diff_m": round(far - near, 3),
        },
    )

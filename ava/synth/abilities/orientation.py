"""Orientation: a 3D object with an unmistakable front, rendered in the paper's 9 views.

A tiny renderer: the object is a set of axis-aligned cuboids in its own frame (x to its left, y up, z to its
front), turned by a yaw about the vertical axis, seen by a perspective camera raised 15-30 degrees above the
ground (or straight down for "top"), faces drawn back to front with Lambert shading. View names follow the
object's point of view: in "right" we see the object's right side, so its front points to the image's right.
Yaw jitter (+-6 degrees x the difficulty's jitter knob) stays well inside the 45 degree spacing of the views.

Fronts: the robot has eyes, a mouth and a nose on its head and a backpack on its back; the car has headlights
and a bonnet in front, a boot and dark tail lights behind; the armchair has armrests and a seat facing front.
"""

from __future__ import annotations

import math

import numpy as np
from PIL import ImageDraw

from ava.abilities import ORIENTATION_VIEWS
from ava.synth.abilities import ask, option_truth
from ava.synth.core import Ctx, Rendered
from ava.synth.shapes import INK, add_noise, gradient, place, random_color, shade

Cuboid = tuple[tuple[float, float, float], tuple[float, float, float], str]

YAW = {view: 45.0 * i for i, view in enumerate(ORIENTATION_VIEWS[:8])}


def _robot() -> list[Cuboid]:
    return [
        ((-0.5, 0.0, -0.3), (0.5, 1.1, 0.3), "main"),  # body
        ((-0.35, 1.1, -0.3), (0.35, 1.65, 0.3), "light"),  # head
        ((-0.25, 1.38, 0.3), (-0.08, 1.5, 0.36), "eye"),  # eyes, mouth and nose on the front
        ((0.08, 1.38, 0.3), (0.25, 1.5, 0.36), "eye"),
        ((-0.18, 1.18, 0.3), (0.18, 1.24, 0.34), "ink"),
        ((-0.05, 1.26, 0.3), (0.05, 1.36, 0.45), "accent"),
        ((-0.35, 0.3, -0.55), (0.35, 0.95, -0.3), "dark"),  # backpack
        ((-0.7, 0.4, -0.12), (-0.5, 1.0, 0.12), "dark"),  # arms
        ((0.5, 0.4, -0.12), (0.7, 1.0, 0.12), "dark"),
        ((-0.2, 0.75, 0.3), (0.2, 0.95, 0.34), "accent"),  # chest light
    ]


def _car() -> list[Cuboid]:
    return [
        ((-0.55, 0.15, -1.1), (0.55, 0.55, 1.1), "main"),  # body
        ((-0.5, 0.55, -0.6), (0.5, 0.95, 0.35), "light"),  # cabin, set back from the long bonnet
        ((-0.45, 0.3, 1.1), (-0.2, 0.45, 1.15), "eye"),  # headlights
        ((0.2, 0.3, 1.1), (0.45, 0.45, 1.15), "eye"),
        ((-0.5, 0.3, -1.15), (-0.3, 0.42, -1.1), "tail"),  # tail lights
        ((0.3, 0.3, -1.15), (0.5, 0.42, -1.1), "tail"),
        ((-0.6, 0.0, 0.55), (-0.5, 0.3, 0.9), "ink"),
        ((0.5, 0.0, 0.55), (0.6, 0.3, 0.9), "ink"),  # wheels
        ((-0.6, 0.0, -0.9), (-0.5, 0.3, -0.55), "ink"),
        ((0.5, 0.0, -0.9), (0.6, 0.3, -0.55), "ink"),
    ]


def _armchair() -> list[Cuboid]:
    return [
        ((-0.6, 0.0, -0.5), (0.6, 0.45, 0.5), "main"),  # base and seat
        ((-0.6, 0.45, -0.5), (0.6, 1.3, -0.25), "dark"),  # back
        ((-0.6, 0.45, -0.25), (-0.42, 0.75, 0.5), "dark"),  # armrests
        ((0.42, 0.45, -0.25), (0.6, 0.75, 0.5), "dark"),
        ((-0.4, 0.45, -0.25), (0.4, 0.55, 0.45), "light"),  # cushion
        ((-0.3, 0.1, 0.5), (0.3, 0.3, 0.53), "accent"),  # front panel
    ]


OBJECTS = {"robot": _robot, "car": _car, "armchair": _armchair}
_FACES = (  # (vertex indices of a cuboid's corners, outward normal)
    ((0, 1, 3, 2), (-1, 0, 0)),
    ((4, 6, 7, 5), (1, 0, 0)),
    ((0, 4, 5, 1), (0, -1, 0)),
    ((2, 3, 7, 6), (0, 1, 0)),
    ((0, 2, 6, 4), (0, 0, -1)),
    ((1, 5, 7, 3), (0, 0, 1)),
)


def _corners(lo, hi) -> np.ndarray:
    return np.array([[(lo, hi)[i][0], (lo, hi)[j][1], (lo, hi)[k][2]] for i in (0, 1) for j in (0, 1) for k in (0, 1)])


def _camera(elev_deg: float, top: bool) -> tuple[np.ndarray, np.ndarray]:
    """Camera position and rotation (rows: right, up, forward) looking at the object's centre."""
    target = np.array([0.0, 0.6, 0.0])
    if top:
        pos = target + np.array([0.0, 8.0, 0.0])
        return pos, np.array([[1.0, 0, 0], [0, 0, -1.0], [0, -1.0, 0]])
    e = math.radians(elev_deg)
    pos = target + 8.0 * np.array([0.0, math.sin(e), math.cos(e)])
    fwd = (target - pos) / np.linalg.norm(target - pos)
    right = np.cross(fwd, [0.0, 1.0, 0.0])
    right /= np.linalg.norm(right)
    up = np.cross(right, fwd)
    return pos, np.stack([right, up, fwd])


def project_faces(parts: list[Cuboid], yaw_deg: float, elev_deg: float, top: bool):
    """Visible faces as (depth, 2D polygon, colour key, shade factor), unsorted, in camera units."""
    a = math.radians(yaw_deg)
    rot = np.array([[math.cos(a), 0, math.sin(a)], [0, 1, 0], [-math.sin(a), 0, math.cos(a)]])
    pos, cam = _camera(elev_deg, top)
    light = np.array([0.4, 0.8, 0.45]) / np.linalg.norm([0.4, 0.8, 0.45])
    faces = []
    for lo, hi, key in parts:
        pts = _corners(lo, hi) @ rot.T
        for idx, normal in _FACES:
            n = rot @ np.array(normal, float)
            centre = pts[list(idx)].mean(axis=0)
            if np.dot(n, pos - centre) <= 1e-9:
                continue
            c = (pts[list(idx)] - pos) @ cam.T
            poly = [(x / z, -y / z) for x, y, z in c]
            faces.append((float(np.linalg.norm(centre - pos)), poly, key, 0.55 + 0.45 * max(0.0, float(n @ light))))
    return faces


def render_orientation(ctx: Ctx) -> Rendered:
    s = ctx.size
    (k,) = ctx.balanced(len(ORIENTATION_VIEWS))
    view = ORIENTATION_VIEWS[k]
    name = ctx.choice(list(OBJECTS))
    top = view == "top"
    jitter = 6.0 * ctx.knobs.jitter
    yaw = ctx.uniform(0, 360) if top else YAW[view] + ctx.uniform(-jitter, jitter)
    elev = ctx.uniform(15, 30)
    faces = project_faces(OBJECTS[name](), yaw, elev, top)
    xs = [x for f in faces for x, _ in f[1]]
    ys = [y for f in faces for _, y in f[1]]
    span = max(max(xs) - min(xs), max(ys) - min(ys))
    extent = s * ctx.uniform(0.45, 0.7) * ctx.knobs.scale
    scale = extent / span
    w, h = (max(xs) - min(xs)) * scale, (max(ys) - min(ys)) * scale
    box = place(ctx, w, h, (s * 0.05, s * 0.05, s * 0.95, s * 0.95), [])
    assert box is not None
    ox, oy = box[0] - min(xs) * scale, box[1] - min(ys) * scale
    image = gradient((s, s), shade(random_color(ctx, 120, 220), 1.5), shade(random_color(ctx, 80, 200), 1.2))
    draw = ImageDraw.Draw(image)
    main = random_color(ctx, 60, 220)
    colours = {
        "main": main,
        "light": shade(main, 1.4),
        "dark": shade(main, 0.55),
        "eye": (250, 250, 235),
        "ink": INK,
        "accent": (250, 200, 40),
        "tail": (120, 30, 20),
    }
    for _, poly, key, f in sorted(faces, key=lambda t: -t[0]):
        fill = tuple(int(c * f) for c in colours[key])
        draw.polygon([(ox + x * scale, oy + y * scale) for x, y in poly], fill=fill, outline=shade(fill, 0.8))
    options = list(ORIENTATION_VIEWS)
    return Rendered(
        image=add_noise(ctx, image),
        question=ask("orientation", options, object=name),
        answer=view,
        truth=option_truth(options, k),
        options=options,
        meta={"class": view, "view": view, "object": name, "yaw_deg": round(yaw, 1), "elevation_deg": round(elev, 1)},
    )

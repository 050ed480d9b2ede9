"""Action: a stick figure in one of 10 poses or activities, seen from the side, facing left or right.

A pose is a table of joint angles (degrees from hanging straight down, positive = towards the facing
direction) turned into limb positions by forward kinematics; each angle gets a small random jitter, scaled by
the difficulty's jitter knob. Cues: jumping is off the ground with tucked knees; cheering keeps the feet down
with both arms up; sitting has a chair; lying down is horizontal; kicking has one straight leg raised forward;
squatting has low hips with folded knees; running leans forward with bent knees and elbows; waving has one arm
up; walking has a moderate stride; standing has straight limbs.
"""

from __future__ import annotations

import math

from PIL import ImageDraw

from ava.synth.abilities import ask, option_truth
from ava.synth.core import Ctx, Rendered
from ava.synth.shapes import INK, add_noise, draw_icon, gradient, place, random_color, shade

# lean, (shoulder, elbow) near arm, (shoulder, elbow) far arm, (hip, knee) near leg, (hip, knee) far leg
POSES: dict[str, tuple[float, tuple[float, float], tuple[float, float], tuple[float, float], tuple[float, float]]] = {
    "standing": (0, (8, 4), (-8, 4), (3, 0), (-3, 0)),
    "walking": (4, (28, 15), (-28, 10), (22, 8), (-20, 12)),
    "running": (18, (65, 85), (-55, 80), (65, 95), (-40, 70)),
    "jumping": (0, (150, 10), (140, 10), (40, 90), (30, 80)),
    "sitting": (0, (30, 40), (25, 45), (90, 90), (85, 90)),
    "waving": (0, (160, -35), (-8, 4), (3, 0), (-3, 0)),
    "cheering": (0, (155, 0), (-155, 0), (6, 0), (-6, 0)),
    "kicking": (-8, (60, 0), (-50, 0), (85, 0), (-5, 0)),
    "squatting": (20, (80, 0), (75, 0), (95, 140), (85, 140)),
    "lying down": (0, (10, 0), (-5, 0), (3, 0), (-3, 0)),
}
CLASSES: tuple[str, ...] = tuple(POSES)


def _vec(angle_deg: float, length: float, facing: int) -> tuple[float, float]:
    a = math.radians(angle_deg)
    return (facing * math.sin(a) * length, math.cos(a) * length)


def skeleton(ctx: Ctx, pose: str, t: float, facing: int) -> dict[str, list[tuple[float, float]]]:
    """Limb polylines (hip at the origin, y down) for torso length ``t``."""
    lean, *limbs = POSES[pose]
    j = 6.0 * ctx.knobs.jitter

    def jit(a: float) -> float:
        return a + ctx.uniform(-j, j)

    hip = (0.0, 0.0)
    tv = _vec(180 - jit(lean), t, facing)  # torso points up, leaning forward
    neck = (hip[0] + tv[0], hip[1] + tv[1])
    parts: dict[str, list[tuple[float, float]]] = {"torso": [hip, neck]}
    for name, (a1, bend), l1, l2, root in (
        ("arm_near", limbs[0], 0.55, 0.5, neck),
        ("arm_far", limbs[1], 0.55, 0.5, neck),
        ("leg_near", limbs[2], 0.62, 0.6, hip),
        ("leg_far", limbs[3], 0.62, 0.6, hip),
    ):
        a1 = jit(a1)
        a2 = a1 + jit(bend) if name.startswith("arm") else a1 - jit(bend)
        v1, v2 = _vec(a1, l1 * t, facing), _vec(a2, l2 * t, facing)
        mid = (root[0] + v1[0], root[1] + v1[1])
        parts[name] = [root, mid, (mid[0] + v2[0], mid[1] + v2[1])]
    head_dir = _vec(180 - lean, 0.32 * t, facing)
    parts["head"] = [(neck[0] + head_dir[0], neck[1] + head_dir[1])]
    return parts


def _transform(parts: dict, fn) -> dict:
    return {k: [fn(p) for p in v] for k, v in parts.items()}


def render_action(ctx: Ctx) -> Rendered:
    s = ctx.size
    (k,) = ctx.balanced(len(CLASSES))
    pose = CLASSES[k]
    facing = 1 if ctx.rng.random() < 0.5 else -1
    t = s * ctx.uniform(0.16, 0.22) * ctx.knobs.scale
    parts = skeleton(ctx, pose, t, facing)
    if pose == "lying down":  # rotate the standing body by 90 degrees about the hip
        parts = _transform(parts, lambda p: (-p[1] * facing, p[0] * facing))
    ground = s * ctx.uniform(0.8, 0.9)
    feet = max(p[1] for name in ("leg_near", "leg_far") for p in parts[name])
    if pose == "lying down":
        feet = max(p[1] for v in parts.values() for p in v) + 0.22 * t
    lift = 0.45 * t if pose == "jumping" else 0.0
    x0 = s / 2 + ctx.uniform(-0.15, 0.15) * s
    dy = ground - feet - lift
    parts = _transform(parts, lambda p: (p[0] + x0, p[1] + dy))
    image = gradient((s, s), shade(random_color(ctx, 120, 220), 1.5), shade(random_color(ctx, 120, 220), 1.3))
    draw = ImageDraw.Draw(image)
    draw.rectangle([0, ground, s, s], fill=shade(random_color(ctx, 60, 180), 1.1))
    boxes = [(x0 - 1.3 * t, ground - 2.6 * t, x0 + 1.3 * t, ground)]
    for _ in range(ctx.n_clutter(0, 2)):
        name = ctx.choice(("tree", "pine", "cloud", "house", "sun"))
        h = s * ctx.uniform(0.1, 0.2)
        bb = place(ctx, h * 1.2, h, (0, 0, s, ground), boxes, gap=s * 0.03)
        if bb is not None:
            boxes.append(bb)
            draw_icon(draw, name, bb, random_color(ctx))
    hip = parts["torso"][0]
    if pose == "sitting":  # a chair under the hips
        seat = hip[1] + 0.05 * t
        back = hip[0] - facing * 0.25 * t
        front = hip[0] + facing * 0.55 * t
        col = shade(random_color(ctx), 0.7)
        w = max(2, round(t * 0.08))
        draw.line([(back, seat), (front, seat)], fill=col, width=w * 2)
        draw.line([(back, seat - 0.9 * t), (back, ground)], fill=col, width=w)
        draw.line([(front, seat), (front, ground)], fill=col, width=w)
    color = shade(random_color(ctx, 20, 200), 0.8)
    width = max(2, round(t * 0.11))
    for name in ("arm_far", "leg_far"):
        draw.line(parts[name], fill=shade(color, 0.7), width=width, joint="curve")
    draw.line(parts["torso"], fill=color, width=round(width * 1.3), joint="curve")
    for name in ("leg_near", "arm_near"):
        draw.line(parts[name], fill=color, width=width, joint="curve")
    hx, hy = parts["head"][0]
    hr = 0.22 * t
    draw.ellipse([hx - hr, hy - hr, hx + hr, hy + hr], fill=color, outline=INK)
    options = list(CLASSES)
    return Rendered(
        image=add_noise(ctx, image),
        question=ask("action", options),
        answer=pose,
        truth=option_truth(options, k),
        options=options,
        meta={"class": pose, "figure_px": round(2.6 * t, 1), "facing": "right" if facing > 0 else "left"},
    )

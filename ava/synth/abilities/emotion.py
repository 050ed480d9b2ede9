"""Emotion: schematic faces, one in a red box, all 7 of the paper's emotions, told apart by mouth, eyes and brows.

Cues (r = face radius): happy: smile, relaxed brows. sad: frown, brows raised at the inner ends. angry: brows
lowered into a V, narrowed eyes, bared teeth. fear: brows raised and slanted up inwards, wide eyes, a wide open
mouth. surprise: high arched brows, wide eyes, a round open mouth. neutral: flat brows, straight mouth.
disgust: one brow lowered, squinted eyes, a lopsided raised lip and a wrinkled nose. Other faces around the
boxed one show other emotions, so only the boxed face answers the question; they are smaller (radius 0.07-0.11 of
the image against 0.3-0.4 for the boxed face at easy), so the asked-about face also dominates the image. The cheap
heads pool the whole image and do not follow the red box: with the boxed face no bigger than the others (radius
0.12-0.2) every extractor sat at chance at the demo's size (``benchmarks/bench_synth_signal.py``).
"""

from __future__ import annotations

from PIL import ImageDraw

from ava.abilities import EMOTIONS
from ava.synth.abilities import ask, option_truth
from ava.synth.core import RED, Ctx, Rendered
from ava.synth.shapes import INK, add_noise, draw_box, place, shade
from ava.synth.textures import backdrop

SKIN = ((241, 194, 160), (224, 172, 105), (198, 134, 66), (170, 110, 60), (255, 219, 172), (160, 105, 70))
# Brow heights (inner end, outer end) in units of r above the eye line (positive = higher).
BROWS = {
    "happy": (0.22, 0.26),
    "sad": (0.36, 0.16),
    "angry": (0.06, 0.30),
    "fear": (0.42, 0.26),
    "surprise": (0.40, 0.40),
    "neutral": (0.22, 0.22),
    "disgust": (0.08, 0.2),
}
EYE_OPEN = {"angry": 0.45, "disgust": 0.35, "fear": 1.5, "surprise": 1.5}


def _mouth(draw: ImageDraw.ImageDraw, emotion: str, cx: float, cy: float, r: float, w: int) -> None:
    my = cy + 0.42 * r
    mw = 0.34 * r
    if emotion == "happy":
        draw.arc([cx - mw, my - 0.3 * r, cx + mw, my + 0.12 * r], 20, 160, fill=INK, width=w)
    elif emotion == "sad":
        draw.arc([cx - mw, my - 0.02 * r, cx + mw, my + 0.4 * r], 200, 340, fill=INK, width=w)
    elif emotion == "angry":
        draw.rectangle(
            [cx - mw * 0.9, my - 0.1 * r, cx + mw * 0.9, my + 0.14 * r],
            fill=(250, 250, 250),
            outline=INK,
            width=max(1, w // 2),
        )
        draw.line([cx - mw * 0.9, my + 0.02 * r, cx + mw * 0.9, my + 0.02 * r], fill=INK, width=max(1, w // 2))
        for t in (-0.5, 0.0, 0.5):  # clenched teeth
            draw.line([cx + t * mw, my - 0.1 * r, cx + t * mw, my + 0.14 * r], fill=INK, width=max(1, w // 3))
    elif emotion == "fear":
        draw.ellipse([cx - mw, my - 0.08 * r, cx + mw, my + 0.16 * r], fill=(60, 20, 20), outline=INK, width=w)
    elif emotion == "surprise":
        draw.ellipse(
            [cx - 0.13 * r, my - 0.12 * r, cx + 0.13 * r, my + 0.24 * r], fill=(60, 20, 20), outline=INK, width=w
        )
    elif emotion == "neutral":
        draw.line([cx - mw * 0.8, my, cx + mw * 0.8, my], fill=INK, width=w)
    else:  # disgust: lopsided raised lip
        draw.line(
            [
                (cx - mw, my + 0.06 * r),
                (cx - 0.1 * r, my + 0.02 * r),
                (cx + 0.15 * r, my - 0.1 * r),
                (cx + mw, my - 0.04 * r),
            ],
            fill=INK,
            width=w,
            joint="curve",
        )
        draw.line([(cx - 0.12 * r, cy + 0.12 * r), (cx - 0.05 * r, cy + 0.08 * r)], fill=INK, width=max(1, w // 2))
        draw.line([(cx + 0.05 * r, cy + 0.08 * r), (cx + 0.12 * r, cy + 0.12 * r)], fill=INK, width=max(1, w // 2))


def draw_face(draw: ImageDraw.ImageDraw, emotion: str, cx: float, cy: float, r: float, skin) -> None:
    w = max(1, round(r * 0.07))
    draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=skin, outline=shade(skin, 0.6), width=max(1, w // 2))
    ey = cy - 0.15 * r
    for side in (-1, 1):
        ex = cx + side * 0.36 * r
        er = 0.09 * r
        open_ = EYE_OPEN.get(emotion, 1.0)
        if emotion == "disgust" and side == 1:
            open_ = 0.8
        if open_ > 1:  # wide eyes show white around the pupil
            draw.ellipse(
                [ex - er * 1.5, ey - er * 1.5, ex + er * 1.5, ey + er * 1.5], fill=(250, 250, 250), outline=INK
            )
        draw.ellipse([ex - er, ey - er * min(open_, 1.0), ex + er, ey + er * min(open_, 1.0)], fill=INK)
        inner, outer = BROWS[emotion]
        if emotion == "disgust" and side == 1:
            inner, outer = 0.24, 0.26
        by = ey - 0.12 * r
        if emotion == "surprise":
            draw.arc([ex - 0.18 * r, by - 0.42 * r, ex + 0.18 * r, by - 0.1 * r], 200, 340, fill=INK, width=w)
        else:
            xi, xo = ex - side * 0.05 * r, ex + side * 0.2 * r
            draw.line([(xi, by - inner * r + 0.1 * r), (xo, by - outer * r + 0.1 * r)], fill=INK, width=w)
    _mouth(draw, emotion, cx, cy, r, w)


def render_emotion(ctx: Ctx) -> Rendered:
    s = ctx.size
    (k,) = ctx.balanced(len(EMOTIONS))
    emotion = EMOTIONS[k]
    image = backdrop(ctx, s)
    draw = ImageDraw.Draw(image)
    r = s * ctx.uniform(0.3, 0.4) * ctx.knobs.scale
    m = s * 0.03
    target = place(ctx, 2 * r, 2 * r, (m, m, s - m, s - m), [])
    assert target is not None
    boxes = [target]
    others = [e for e in EMOTIONS if e != emotion]
    for _ in range(ctx.n_clutter(0, 2)):
        rr = s * ctx.uniform(0.07, 0.11)
        bb = place(ctx, 2 * rr, 2 * rr, (0, 0, s, s), boxes, gap=s * 0.04)
        if bb is not None:
            boxes.append(bb)
            draw_face(draw, ctx.choice(others), bb[0] + rr, bb[1] + rr, rr, ctx.choice(SKIN))
    draw_face(draw, emotion, target[0] + r, target[1] + r, r, ctx.choice(SKIN))
    image = add_noise(ctx, image)
    draw_box(image, target, RED)
    options = list(EMOTIONS)
    return Rendered(
        image=image,
        question=ask("emotion", options),
        answer=emotion,
        truth=option_truth(options, k),
        options=options,
        meta={"class": emotion, "face_px": round(2 * r, 1)},
    )

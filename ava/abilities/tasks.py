"""Task-augmentation tasks (Meta-COCO / Meta-KITTI, docs/benchmark.md), registered as abilities
beside the 14 of AVA-Bench.

Every key starts with :data:`TASK_PREFIX` so reports keep them apart from the benchmark's abilities; each has its
question template, answer kind and metric like any ability, and ``extra["template"]`` names the paper's template
id (T1.1 ... T8.1) and ``extra["metadata"]`` where its truth comes from (rules over annotations, a depth map,
people, or the image alone). ``ava data build`` writes them (``ava.curate.tasks``).
"""

from __future__ import annotations

from ava.abilities.base import Ability

TASK_PREFIX = "ta_"
YES_NO = ("yes", "no")
RED_BLUE = ("red", "blue")
TILES = ("top left", "top right", "bottom left", "bottom right")  # the 2x2 grid of image-variant questions

# (key without prefix, template id, metadata source, answer kind, options, option style, question)
_TASKS: tuple[tuple[str, str, str, str, tuple[str, ...], str, str], ...] = (
    (
        "presence",
        "T1.1",
        "rules",
        "option",
        YES_NO,
        "number",
        "Is there a {object} in the image? Choose one: {options}.",
    ),
    ("count", "T1.2", "rules", "integer", (), "number", "How many {object} are there in the image?"),
    (
        "more_than_one",
        "T1.3",
        "rules",
        "option",
        YES_NO,
        "number",
        "Is there more than one {object} in the image? Choose one: {options}.",
    ),
    (
        "occluded",
        "T2.1",
        "people",
        "option",
        (),
        "letter",
        "Is the {object} in the red box occluded? Choose one: {options}.",
    ),
    (
        "truncated",
        "T2.2",
        "rules",
        "option",
        YES_NO,
        "number",
        "Is the {object} in the red box cut off by the image frame? Choose one: {options}.",
    ),
    (
        "blurred_object",
        "T2.3",
        "image",
        "option",
        YES_NO,
        "number",
        "Is the {object} in the red box blurred? Choose one: {options}.",
    ),
    (
        "noisy_object",
        "T2.4",
        "image",
        "option",
        YES_NO,
        "number",
        "Does the {object} in the red box contain noise? Choose one: {options}.",
    ),
    (
        "least_blurred",
        "T2.5",
        "image",
        "option",
        TILES,
        "letter",
        "Which of the four image variants is the least blurred? Choose one: {options}.",
    ),
    (
        "not_noisy",
        "T2.6",
        "image",
        "option",
        TILES,
        "letter",
        "Which of the four image variants is not corrupted by noise? Choose one: {options}.",
    ),
    (
        "larger",
        "T3.1",
        "rules",
        "option",
        RED_BLUE,
        "number",
        "Which object is larger, the {a} in the red box or the {b} in the blue box? Choose one: {options}.",
    ),
    (
        "further_left",
        "T3.2",
        "rules",
        "option",
        RED_BLUE,
        "number",
        "Which object is further left, the {a} in the red box or the {b} in the blue box? Choose one: {options}.",
    ),
    (
        "further_down",
        "T3.3",
        "rules",
        "option",
        RED_BLUE,
        "number",
        "Which object is further to the bottom, the {a} in the red box or the {b} in the blue box? "
        "Choose one: {options}.",
    ),
    (
        "another_left",
        "T3.4",
        "rules",
        "option",
        YES_NO,
        "number",
        "Is there another object further left than the {object} in the red box? Choose one: {options}.",
    ),
    (
        "another_below",
        "T3.5",
        "rules",
        "option",
        YES_NO,
        "number",
        "Is there another object further to the bottom than the {object} in the red box? Choose one: {options}.",
    ),
    (
        "touching",
        "T4.1",
        "rules",
        "option",
        YES_NO,
        "number",
        "Are the {a} in the red box and the {b} in the blue box touching? Choose one: {options}.",
    ),
    (
        "facing_camera",
        "T4.2",
        "people",
        "option",
        (),
        "letter",
        "Is the {object} in the red box facing the camera? Choose one: {options}.",
    ),
    (
        "true_colour_tile",
        "T5.1",
        "image",
        "option",
        TILES,
        "letter",
        "The image is shown in grey with one area cut out. Which of the four tiles shows that area in its true "
        "colours? Choose one: {options}.",
    ),
    (
        "second_brightest",
        "T5.2",
        "image",
        "option",
        TILES,
        "letter",
        "Which of the four image variants is the second brightest? Choose one: {options}.",
    ),
    (
        "not_colour_corrupted",
        "T5.3",
        "image",
        "option",
        TILES,
        "letter",
        "Which of the four image variants shows the true colours? Choose one: {options}.",
    ),
    (
        "brighter_point",
        "T5.4",
        "image",
        "option",
        RED_BLUE,
        "number",
        "Which point is brighter, the red one or the blue one? Choose one: {options}.",
    ),
    (
        "nearer_object",
        "T6.1",
        "depth",
        "option",
        RED_BLUE,
        "number",
        "Which object is closer to the camera, the {a} in the red box or the {b} in the blue box? "
        "Choose one: {options}.",
    ),
    (
        "nearer_point",
        "T6.2",
        "depth",
        "option",
        RED_BLUE,
        "number",
        "Which point is closer to the camera, the red one or the blue one? Choose one: {options}.",
    ),
    (
        "rotated_jigsaw",
        "T7.1",
        "image",
        "option",
        TILES,
        "letter",
        "Which of the four tiles, each turned differently, fits the cut-out area as it is? Choose one: {options}.",
    ),
    (
        "jigsaw",
        "T7.2",
        "image",
        "option",
        TILES,
        "letter",
        "Which of the four tiles fits the cut-out area? Choose one: {options}.",
    ),
    (
        "unrotated",
        "T8.1",
        "image",
        "option",
        TILES,
        "letter",
        "Which of the four image variants is not rotated? Choose one: {options}.",
    ),
)

METADATA = {
    "rules": "rules over instance annotations (masks, boxes, classes)",
    "depth": "a depth map (a sensor's, or a depth model's)",
    "people": "per-instance attributes given by raters",
    "image": "the image alone (exact truth by construction)",
}


def task_abilities() -> list[Ability]:
    """The task-augmentation abilities, in template order."""
    out = []
    for name, template, source, kind, options, style, question in _TASKS:
        out.append(
            Ability(
                key=f"{TASK_PREFIX}{name}",
                config_name=f"TA_{name}",
                title=f"{template} {name.replace('_', ' ')}",
                answer_kind=kind,  # type: ignore[arg-type]
                metric="mae_gt" if kind == "integer" else "accuracy",
                higher_is_better=kind != "integer",
                question_templates=(question,),
                fixed_options=options,
                option_style=style,  # type: ignore[arg-type]
                subgroups=("class",) if "{object}" in question or "{a}" in question else (),
                notes=f"Task augmentation {template}; truth from {METADATA[source]}.",
                extra={"template": template, "metadata": source},
            )
        )
    return out


def is_task(key: str) -> bool:
    return key.startswith(TASK_PREFIX)

"""The 14 atomic visual abilities of AVA-Bench (docs/benchmark.md), registered by key.

Question templates use ``str.format`` fields: ``{object}``, ``{a}``, ``{b}``, ``{family}`` and
``{options}`` (the output of :func:`format_options`).
"""

from __future__ import annotations

from ava.abilities.base import Ability, AnswerKind, format_options, option_label
from ava.registry import Plugins, Registry

# Plugins: an ``ava.abilities`` entry point gives an Ability, a list of them, or a callable returning either
# (README); registered under its key, with its config_name as alias.
ABILITIES: Registry[Ability] = Registry(
    "ability", Plugins("ava.abilities", Ability, name=lambda a: a.key, aliases=lambda a: (a.config_name,))
)

ORIENTATION_VIEWS = (
    "front",
    "front right",
    "right",
    "back right",
    "back",
    "back left",
    "left",
    "front left",
    "top",
)
EMOTIONS = ("happy", "sad", "angry", "fear", "surprise", "neutral", "disgust")
SPATIAL_ANSWERS = ("Left above", "Left below", "Right above", "Right below")
REL_DEPTH_ANSWERS = ("red", "blue")
# The 47 classes of the Describable Textures Dataset, which the release's texture questions list.
DTD_TEXTURES = (
    "banded",
    "blotchy",
    "braided",
    "bubbly",
    "bumpy",
    "chequered",
    "cobwebbed",
    "cracked",
    "crosshatched",
    "crystalline",
    "dotted",
    "fibrous",
    "flecked",
    "freckled",
    "frilly",
    "gauzy",
    "grid",
    "grooved",
    "honeycombed",
    "interlaced",
    "knitted",
    "lacelike",
    "lined",
    "marbled",
    "matted",
    "meshed",
    "paisley",
    "perforated",
    "pitted",
    "pleated",
    "polka-dotted",
    "porous",
    "potholed",
    "scaly",
    "smeared",
    "spiralled",
    "sprinkled",
    "stained",
    "stratified",
    "striped",
    "studded",
    "swirly",
    "veined",
    "waffled",
    "woven",
    "wrinkled",
    "zigzagged",
)
INDOOR_DEPTH_BINS = tuple(f"{d}-{d + 1}" for d in range(1, 7))  # 1-2 ... 6-7 m
OUTDOOR_DEPTH_BINS = tuple(f"{d}-{d + 1}" for d in range(8, 31))  # 8-9 ... 30-31 m


def _a(**kw: object) -> Ability:
    ability = Ability(**kw)  # type: ignore[arg-type]
    ABILITIES.register(ability.key, ability, aliases=(ability.config_name,))
    return ability


_a(
    key="localization",
    config_name="Localization",
    title="Localization",
    answer_kind="box",
    metric="giou",
    higher_is_better=True,
    epochs=20,
    subgroups=("box_area",),
    question_templates=("Provide bounding box coordinate for {object}.",),
    notes="No box is drawn; the answer is x1,y1,x2,y2 in normalized image coordinates.",
)
_a(
    key="counting",
    config_name="Counting",
    title="Counting",
    answer_kind="integer",
    metric="mae_gt",
    higher_is_better=False,
    subgroups=("count_range", "source"),
    question_templates=("How many {object} are there in the image?",),
)
_a(
    key="fine_grained",
    config_name="Fine-grained",
    title="Fine-grained",
    answer_kind="option",
    metric="accuracy",
    higher_is_better=True,
    subgroups=("source",),
    question_templates=("What species of {family} is in the image? Choose one from below: {options}.",),
)
_a(
    key="abs_depth",
    config_name="Absolute_depth",
    title="Absolute depth",
    answer_kind="depth_bin",
    metric="mae_gt",
    higher_is_better=False,
    option_style="letter",
    subgroups=("scene_type", "depth_range"),
    question_templates=(
        "Based on the image, estimate how far the closest point of the {object} (highlighted by a red box) is "
        "from the camera in meters. Select the best option: {options}.",
    ),
    notes="Bins score at their midpoints, e.g. '2-3' is 2.5 m.",
)
_a(
    key="rel_depth",
    config_name="Relative_depth",
    title="Relative depth",
    answer_kind="option",
    metric="accuracy",
    higher_is_better=True,
    fixed_options=REL_DEPTH_ANSWERS,
    subgroups=("scene_type",),
    question_templates=(
        "Which object is closer to the camera, the {a} (highlighted by a red box) or the {b} (highlighted by a "
        "blue box)? Choose one: {options}.",
    ),
)
_a(
    key="ocr",
    config_name="OCR",
    title="OCR",
    answer_kind="text",
    metric="anls",
    higher_is_better=True,
    subgroups=("text_length", "source", "text_domain"),
    question_templates=("What is written in the red bounding box in the image?",),
)
_a(
    key="orientation",
    config_name="Orientation",
    title="Orientation",
    answer_kind="option",
    metric="accuracy",
    higher_is_better=True,
    fixed_options=ORIENTATION_VIEWS,
    subgroups=("view",),
    question_templates=("What is the orientation of the {object} in the image? Choose one from below: {options}.",),
)
_a(
    key="recognition",
    config_name="Recognition",
    title="Object recognition",
    answer_kind="option",
    metric="accuracy",
    higher_is_better=True,
    subgroups=("source",),
    question_templates=("What is in the red bounding box? Choose from the following option: {options}.",),
)
_a(
    key="action",
    config_name="Action",
    title="Action",
    answer_kind="option",
    metric="accuracy",
    higher_is_better=True,
    subgroups=("source",),
    question_templates=(
        "Which action or activity is shown in the image? Choose from the following option: {options}.",
    ),
)
_a(
    key="texture",
    config_name="Texture",
    title="Texture",
    answer_kind="option",
    metric="accuracy",
    higher_is_better=True,
    subgroups=("class",),
    question_templates=("What is the texture attribute of the image? Choose one from below: {options}.",),
)
_a(
    key="spatial",
    config_name="Spatial",
    title="Spatial",
    answer_kind="option",
    metric="accuracy",
    higher_is_better=True,
    fixed_options=SPATIAL_ANSWERS,
    option_style="letter",
    subgroups=("class",),
    question_templates=(
        "In the image, where is the {a} (annotated by the red box) located with respect to the {b} (annotated "
        "by the blue box)? Choose from {options}.",
    ),
)
_a(
    key="scene",
    config_name="Scene_Classification",
    title="Scene",
    answer_kind="option",
    metric="accuracy",
    higher_is_better=True,
    subgroups=("source",),
    question_templates=("What is the scene class of the image? Choose one from below: {options}.",),
)
_a(
    key="emotion",
    config_name="Emotion",
    title="Emotion",
    answer_kind="option",
    metric="accuracy",
    higher_is_better=True,
    fixed_options=EMOTIONS,
    subgroups=("class",),
    question_templates=("Which of the following best describes the person's emotion in the red box? {options}.",),
)
_a(
    key="color",
    config_name="Color",
    title="Colour",
    answer_kind="rgb",
    metric="ciede2000",
    higher_is_better=False,
    subgroups=(),
    question_templates=("What color is shown within the red bounding box?",),
    notes="Answer is an sRGB triple 0..255; scored by CIEDE2000 (lower is better).",
)

ABILITY_KEYS: tuple[str, ...] = tuple(ABILITIES.names(plugins=False))  # the 14 of the benchmark


def _register_tasks() -> tuple[str, ...]:
    from ava.abilities.tasks import task_abilities

    return tuple(_a(**vars(t)).key for t in task_abilities())


# Task-augmentation tasks (``ava data build``), registered after the 14 and kept out of ABILITY_KEYS: the synthetic
# suite, the demo and the fingerprint's default list stay the benchmark's 14.
TASK_KEYS: tuple[str, ...] = _register_tasks()
BUILTIN_KEYS: tuple[str, ...] = ABILITY_KEYS + TASK_KEYS


def get_ability(name: str) -> Ability:
    """An ability by key or release config name (case-insensitive), with "did you mean" on typos."""
    return ABILITIES.get(name)


__all__ = [
    "ABILITIES",
    "ABILITY_KEYS",
    "Ability",
    "BUILTIN_KEYS",
    "TASK_KEYS",
    "AnswerKind",
    "DTD_TEXTURES",
    "EMOTIONS",
    "INDOOR_DEPTH_BINS",
    "ORIENTATION_VIEWS",
    "OUTDOOR_DEPTH_BINS",
    "REL_DEPTH_ANSWERS",
    "SPATIAL_ANSWERS",
    "format_options",
    "get_ability",
    "option_label",
]

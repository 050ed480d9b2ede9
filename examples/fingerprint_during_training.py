"""A fingerprint inside a training loop, on a CPU, in a few minutes.

A small ViT (timm's VisionTransformer: 64 px input, 8 px patches, width 128, 4 blocks), built with RANDOM init, is
trained from scratch on a self-made task: images of 1 to 4 coloured squares on a grey background, with three labels
to predict (how many squares; the hue of the largest, in 6 bins; the quadrant its centre is in). Every ``--every``
steps, starting before the first step, ``ava.callbacks.FingerprintMonitor`` fingerprints the model's second-to-last
block on the built-in SYNTHETIC AVA suite (14 abilities x ``--per-ava`` samples, 64 px; linear probe + kNN), logs it,
and appends one line with all 14 abilities to ``OUT/fingerprints.jsonl``; at the end ``OUT/fingerprints.png`` plots
each ability over the steps, with the ``pixels`` floor (computed once on the same suite) as a dashed line.

What it shows: the fingerprint of a model in training is logged as it trains, and moves away from its random-init
values. It does not show which abilities the task teaches: with the default 60 samples per ability (12 scored) the
curves move by a few samples at a time, within their noise; raise ``--per-ava`` (and wait longer) for steadier ones.
A random-init model trained for minutes on synthetic data: none of these numbers says anything about a real VFM.
The run that made ``examples/fingerprint_during_training.png`` (2-core shared CPU, load ~5, 244 s in all: training
~140 s, five fingerprints 12-30 s each, the ``pixels`` baseline once 24 s) is described in ``examples/README.md``.

    python examples/fingerprint_during_training.py --steps 200 --out runs/in-training
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch
from torch import nn

import ava  # noqa: F401  (before timm: ava's torchvision fix)
from ava.callbacks import FingerprintMonitor, default_suite
from ava.vfm.module import vfm_from_module

SIZE = 64
HUES = 6


def make_model(seed: int) -> nn.Module:
    """A small ViT with random init and three linear heads on its CLS token (count, hue, quadrant)."""
    from timm.models.vision_transformer import VisionTransformer

    torch.manual_seed(seed)
    vit = VisionTransformer(img_size=SIZE, patch_size=8, embed_dim=128, depth=4, num_heads=4, num_classes=0)
    return nn.ModuleDict({"vit": vit, "heads": nn.Linear(128, 4 + HUES + 4)})


def hsv_to_rgb(h: torch.Tensor, s: float = 0.9, v: float = 0.9) -> torch.Tensor:
    """Hue in [0, 1) -> RGB in [0, 1] ([N, 3])."""
    k = (torch.tensor([5.0, 3.0, 1.0]) + h[:, None] * 6) % 6
    return v - v * s * torch.clamp(torch.minimum(k, 4 - k), 0, 1)


def batch(n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` images [n, 3, 64, 64] in [0, 1] and their labels [n, 3] (count - 1, hue bin, quadrant of the largest)."""
    images = torch.full((n, 3, SIZE, SIZE), 0.5)
    labels = torch.zeros(n, 3, dtype=torch.long)
    for i in range(n):
        count = int(torch.randint(1, 5, (1,), generator=g))
        sides = torch.randint(6, 20, (count,), generator=g)
        hues = torch.rand(count, generator=g)
        colours = hsv_to_rgb(hues)
        corners = []
        for j in range(count):
            s = int(sides[j])
            y, x = (int(v) for v in torch.randint(0, SIZE - s, (2,), generator=g))
            images[i, :, y : y + s, x : x + s] = colours[j, :, None, None]
            corners.append((y, x))
        big = int(sides.argmax())
        (y, x), s = corners[big], int(sides[big])
        quadrant = 2 * int(y + s / 2 >= SIZE / 2) + int(x + s / 2 >= SIZE / 2)
        labels[i] = torch.tensor([count - 1, min(HUES - 1, int(hues[big] * HUES)), quadrant])
    return images, labels


def loss_of(model: nn.Module, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    x = (images - 0.5) / 0.5  # the normalization the VFM wrapper below uses
    out = model["heads"](model["vit"](x))
    f = nn.functional.cross_entropy
    return f(out[:, :4], labels[:, 0]) + f(out[:, 4 : 4 + HUES], labels[:, 1]) + f(out[:, 4 + HUES :], labels[:, 2])


def plot(lines: list[dict], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    abilities = list(lines[0]["scores"]["probe-linear"])
    steps = [line["step"] for line in lines]
    cols = 5
    fig, axes = plt.subplots(math.ceil(len(abilities) / cols), cols, figsize=(15, 8.5), squeeze=False)
    for ax, ava_key in zip(axes.flat, abilities, strict=False):
        for head, colour in (("probe-linear", "tab:blue"), ("knn", "tab:orange")):
            ax.plot(steps, [line["scores"][head][ava_key] for line in lines], "o-", color=colour, ms=3, label=head)
            floor = lines[-1]["baselines"].get("pixels", {}).get(head, {}).get(ava_key)
            if floor is not None:
                ax.axhline(floor, color=colour, ls="--", lw=0.8, label=f"pixels ({head})")
        arrow = "higher" if lines[0]["higher_is_better"][ava_key] else "lower"
        ax.set_title(f"{ava_key} ({lines[0]['metrics'][ava_key]}, {arrow} is better)", fontsize=9)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(abilities) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=6)
    fig.suptitle(
        "Fingerprint during training: a RANDOM-INIT small ViT trained on a synthetic squares task (CPU), "
        "fingerprinted on the SYNTHETIC AVA suite every few steps (x: training step)",
        fontsize=10,
    )
    fig.tight_layout()
    path = out / "fingerprints.png"
    fig.savefig(path, dpi=110)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--every", type=int, default=50, help="fingerprint every N steps (and before the first)")
    ap.add_argument("--out", default="runs/in-training")
    ap.add_argument("--per-ava", type=int, default=60, help="samples per ability in the evaluation suite")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--suite-root", default=None, help="where the suite is generated (default $AVA_HOME/suites)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "fingerprints.jsonl").unlink(missing_ok=True)
    started = time.perf_counter()

    model = make_model(args.seed)
    vfm = vfm_from_module(
        model["vit"],
        name="small-vit-example",
        version="in-training",
        size=SIZE,
        mean=(0.5,) * 3,
        std=(0.5,) * 3,
        output="blocks.2",
        prefix_tokens=1,
    )

    def log(metrics: dict[str, float], step: int) -> None:  # your logger here: SummaryWriter, wandb.log, ...
        rank = metrics.get("ava/probe-linear/avg_rank")
        print(
            f"step {step:4d}  fingerprint: avg rank vs pixels (linear probe) {rank:.2f}  "
            f"counting {metrics['ava/probe-linear/counting']:.3f}  color {metrics['ava/probe-linear/color']:.1f}  "
            f"spatial {metrics['ava/probe-linear/spatial']:.3f}",
            flush=True,
        )

    suite = default_suite(per_ava=args.per_ava, size=SIZE, root=args.suite_root)
    monitor = FingerprintMonitor(vfm, every=args.every, suite=suite, out=out, baselines=("pixels#size=64",), log=log)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.05)
    g = torch.Generator().manual_seed(args.seed)
    monitor.maybe_run(0)  # the random-init fingerprint
    for step in range(1, args.steps + 1):
        model.train()
        loss = loss_of(model, *batch(args.batch_size, g))
        loss.backward()
        opt.step()
        opt.zero_grad()
        if step % 25 == 0:
            print(f"step {step:4d}  training loss {loss.item():.3f}", flush=True)
        monitor.maybe_run(step)
    if args.steps % args.every:
        monitor.run(args.steps)  # the final fingerprint
    lines = [json.loads(line) for line in (out / "fingerprints.jsonl").read_text().splitlines()]
    for line in lines:  # the baseline's key in the plot: "pixels"
        line["baselines"] = {k.split("#")[0]: v for k, v in line["baselines"].items()}
    path = plot(lines, out)
    first, last = lines[0]["scores"]["probe-linear"], lines[-1]["scores"]["probe-linear"]
    print(
        f"\n{len(lines)} fingerprints in {out / 'fingerprints.jsonl'}; plot: {path}; "
        f"{time.perf_counter() - started:.0f} s in all"
    )
    print("linear probe, step 0 -> step", lines[-1]["step"], "(random-init model, synthetic data):")
    for key in first:
        print(f"  {key:13s} {first[key]:8.3f} -> {last[key]:8.3f}")


if __name__ == "__main__":
    main()

"""A report over runs scored by the real scorer on a tiny synthetic suite: baselines, plots, report.html, and
report.html in a real headless browser (Chromium) where one is installed."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from ava.report import _build, make_report
from ava.report.plots import _panel_state, vfm_color
from ava.report.strict_json import loads_strict
from tests.helpers import REPORT_VFMS, make_report_dataset, write_scored_run


@pytest.fixture(scope="module")
def scored(tmp_path_factory) -> tuple[dict, Path, list[Path]]:
    root = tmp_path_factory.mktemp("scored")
    data = make_report_dataset(root)
    runs = [
        write_scored_run(data, root / "runs", head, vfm, right, seed=i)
        for i, head in enumerate(("knn", "probe-linear"))
        for vfm, right in REPORT_VFMS.items()
    ]
    out = root / "report"
    return make_report(runs, out, n_boot=300), out, runs


def test_results_carry_fingerprint_and_decode(scored):
    _, _, runs = scored
    res = loads_strict((runs[0] / "results_test.json").read_text())
    fp = res["sample_set"]
    assert len(fp["value"]) == 64 and set(fp["per_ability"]) == {"localization", "counting", "spatial", "emotion"}
    assert res["decode"] is None  # a feature head
    other = loads_strict((runs[1] / "results_test.json").read_text())["sample_set"]
    assert other["per_ability"] == fp["per_ability"]  # other VFM, same samples: same fingerprint


def test_baselines(scored):
    rep, _, _ = scored
    b = rep["heads"]["knn"]["baselines"]
    assert b["spatial"]["chance"]["value"] == pytest.approx(0.25)  # 4 options
    assert b["emotion"]["chance"]["value"] == pytest.approx(1 / 7)
    assert b["localization"]["chance"]["value"] is None and "no options" in b["localization"]["chance"]["reason"]
    assert b["spatial"]["majority"]["value"] is not None and b["spatial"]["majority"]["answer"]
    assert all(x["chance"]["n"] in (0, 10) for x in b.values())


def test_uncertainty_and_ties(scored):
    rep, _, _ = scored
    t = rep["heads"]["knn"]
    assert t["n"]["spatial"] == {"good": 10, "noisy": 10, "mute": 10}
    lo, hi = t["intervals"]["spatial"]["good"]
    assert lo <= t["values"]["spatial"]["good"] <= hi and hi > lo
    assert t["uncertainty"]["paired"] is True and t["uncertainty"]["n_boot"] == 300
    assert t["p_beats"]["spatial"]["good"]["mute"] > 0.95  # good answers right, mute never parses
    assert t["average_rank_interval"]["good"][0] >= 1


def test_agreement_has_intervals_with_three_vfms(scored):
    rep, _, _ = scored
    (agr,) = rep["agreement"]
    a = agr["average_rank"]
    assert a["n"] == 3 and a["kendall_tau"] is not None and len(a["kendall_tau_ci"]) == 2
    assert agr["same_samples"] is True and agr["average_over"]


def test_plots_normalized_by_baseline(scored):
    rep, out, _ = scored
    kinds = rep["plots"]["knn"]
    assert {"bars", "normalized", "ranks"} <= set(kinds)
    for files in kinds.values():
        assert all((out / f).stat().st_size > 1000 for f in files)


def test_all_unparsed_panel_is_marked(scored):
    rep, _, runs = scored
    _, tables, _ = _build(runs[:3], "test", allow_mixed=False, n_boot=100, seed=0, opening=None)
    t = tables["knn"]
    assert _panel_state(t, "spatial") is None
    mute = dataclasses.replace(t, n_unparsed={ab: dict(t.n[ab]) for ab in t.abilities})
    assert _panel_state(mute, "spatial") == "all replies unparsed"


def test_vfm_colour_is_fixed():
    assert vfm_color("dinov2") == vfm_color("dinov2")
    assert len({vfm_color(v) for v in ("pixels", "random-vit", "dinov2", "siglip2")}) >= 3


class _Refs(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.refs: list[str] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.refs += [v or "" for k, v in attrs if k in ("src", "href", "action", "poster", "srcset", "data")]


def test_html_is_self_contained(scored):
    _, out, _ = scored
    text = (out / "report.html").read_text()
    parser = _Refs()
    parser.feed(text)
    assert parser.refs and all(r.startswith(("data:", "#")) for r in parser.refs), parser.refs[:5]
    assert "http://" not in text and "https://" not in text and "url(" not in text and "@import" not in text
    assert parser.tags.count("table") >= 4 and "script" in parser.tags
    assert text.count('src="data:image/png;base64,') >= 4  # the plots
    assert 'alt="sample ' in text and "data:image/jpeg;base64," in text  # the gallery


BROWSER = next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
_PROBE = """<script>window.addEventListener('load', function () {
  var imgs = Array.prototype.filter.call(document.images, function (i) { return i.complete && i.naturalWidth > 0; });
  var gallery = imgs.filter(function (i) { return i.alt.indexOf('sample ') === 0; });
  var rows = document.querySelectorAll('table.sortable tbody tr');
  var t = document.querySelector('table.sortable');
  var probe = [imgs.length, gallery.length, rows.length, t ? t.offsetHeight : 0];
  document.body.setAttribute('data-probe', probe.join(','));
});</script></body>"""


@pytest.mark.skipif(BROWSER is None, reason="no Chromium installed (apt-get install chromium)")
def test_html_renders_in_a_headless_browser(scored, tmp_path):
    _, out, _ = scored
    page = tmp_path / "probe.html"
    page.write_text((out / "report.html").read_text().replace("</body>", _PROBE))
    args = [
        BROWSER,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--virtual-time-budget=5000",
    ]
    dom = subprocess.run([*args, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    probe = dom.stdout.split('data-probe="', 1)[1].split('"', 1)[0]
    images, gallery, rows, height = map(int, probe.split(","))
    assert images >= 5 and gallery >= 1 and rows >= 8 and height > 0, probe
    shot = tmp_path / "shot.png"
    run = subprocess.run(
        [*args, "--window-size=1280,2000", f"--screenshot={shot}", (out / "report.html").as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0 and shot.stat().st_size > 10_000, run.stderr[-2000:]

import json

import pytest
from PIL import Image

from ava.data.format import Dataset, DatasetError, DatasetWriter, Sample


def _sample(rel: str, sid: str = "s1", ava: str = "color") -> Sample:
    return Sample(
        id=sid, ava=ava, image=rel, width=8, height=8, question="q", answer="(1, 2, 3)", truth={"rgb": [1, 2, 3]}
    )


def test_images_are_content_addressed_and_stored_once(tmp_path):
    with DatasetWriter(tmp_path, {"source": "test"}) as w:
        a = w.add_image(Image.new("RGB", (8, 8), (1, 2, 3)))
        b = w.add_image(Image.new("RGB", (8, 8), (1, 2, 3)))
        c = w.add_image(Image.new("L", (8, 8), 9))
        w.add_sample(_sample(a, "s1"))
        w.add_sample(_sample(b, "s2"))
    assert a == b != c
    assert len(list((tmp_path / "images").rglob("*.png"))) == 2
    ds = Dataset(tmp_path)
    assert [s.id for s in ds.samples("color")] == ["s1", "s2"]
    assert ds.load_image(ds.samples()[0]).getpixel((0, 0)) == (1, 2, 3)
    assert ds.samples()[0].image_sha256 in a


def test_reopening_a_dataset_merges_samples(tmp_path):
    with DatasetWriter(tmp_path) as w:
        w.add_sample(_sample(w.add_image(Image.new("RGB", (4, 4))), "s1"))
    with DatasetWriter(tmp_path) as w:
        w.add_sample(_sample(w.add_image(Image.new("RGB", (4, 4))), "s2", ava="ocr"))
    ds = Dataset(tmp_path)
    assert ds.abilities() == ["ocr", "color"]
    assert len(ds.samples()) == 2


def test_bad_inputs_name_the_file(tmp_path):
    with pytest.raises(DatasetError, match="dataset.json is missing"):
        Dataset(tmp_path)
    with DatasetWriter(tmp_path) as w:
        w.add_sample(_sample(w.add_image(Image.new("RGB", (4, 4)))))
    with (tmp_path / "samples" / "color.jsonl").open("a") as f:
        f.write("{not json\n")
    with pytest.raises(DatasetError, match=r"color.jsonl:2: malformed"):
        Dataset(tmp_path).samples()
    (tmp_path / "dataset.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(DatasetError, match="not an ava dataset"):
        Dataset(tmp_path)


def test_a_failed_write_keeps_the_sample_files_as_they_were(tmp_path):
    with DatasetWriter(tmp_path) as w:
        w.add_sample(_sample(w.add_image(Image.new("RGB", (4, 4))), "s1"))
    before = (tmp_path / "samples" / "color.jsonl").read_text()
    with pytest.raises(RuntimeError), DatasetWriter(tmp_path) as w:
        w.add_sample(_sample(w.add_image(Image.new("RGB", (4, 4))), "s2"))
        raise RuntimeError("interrupted")
    assert (tmp_path / "samples" / "color.jsonl").read_text() == before


def test_image_sha256_is_the_stem_of_the_image_name_for_any_path() -> None:
    """The image's sha256 is read without a Path where that gives the same name: odd paths (empty, ``.``,
    ``..``, doubled and trailing slashes) give what ``Path(image).name`` gives."""
    import random
    from pathlib import Path

    from ava.sample import Sample

    rng = random.Random(0)
    parts = ["ab", f"{'e' * 64}.png", "..", ".", "", "x.y.jpg", "/"]
    for _ in range(5000):
        image = "/".join(rng.choice(parts) for _ in range(rng.randint(1, 4)))
        sample = Sample(id="1", ava="color", image=image, width=1, height=1, question="", answer="", truth={})
        assert sample.image_sha256 == Path(image).name.split(".")[0], image


def test_reading_samples_pauses_the_collector_and_leaves_it_as_it_found_it(tmp_path, monkeypatch):
    """The cyclic collector is off while a sample file is read (its full collections made loading grow faster than
    the samples), back on after, also when a line is bad; a collector the caller turned off stays off."""
    import gc

    from ava.data import format as fmt

    with DatasetWriter(tmp_path) as w:
        for i in range(3):
            w.add_sample(_sample(w.add_image(Image.new("RGB", (4, 4), (i, 0, 0))), f"s{i}"))
    seen = []
    real = fmt._sample_from_line
    monkeypatch.setattr(fmt, "_sample_from_line", lambda line: seen.append(gc.isenabled()) or real(line))
    path = tmp_path / "samples" / "color.jsonl"
    assert gc.isenabled() and len(fmt.read_samples(path)) == 3
    assert seen == [False, False, False] and gc.isenabled()
    path.write_text(path.read_text() + "{not json\n")
    with pytest.raises(DatasetError, match=r"color.jsonl:4: malformed sample"):
        fmt.read_samples(path)
    assert gc.isenabled()
    gc.disable()
    try:
        with fmt.gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()

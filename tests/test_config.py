from dataclasses import dataclass, field

import pytest

from ava.config import load_config
from ava.errors import AvaError


@dataclass
class _Cfg:
    data: str = "d"
    lr: float = 1e-4
    ava: list[str] = field(default_factory=list)


def test_defaults_then_file_then_cli(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('lr = 0.5\nava = ["ocr"]\n')
    cfg = load_config(_Cfg, path, lr=None, data="x")
    assert (cfg.data, cfg.lr, cfg.ava) == ("x", 0.5, ["ocr"])
    assert load_config(_Cfg, path, lr=0.1).lr == 0.1


def test_unknown_fields_are_named(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("learning_rate = 0.5\n")
    with pytest.raises(AvaError, match="learning_rate"):
        load_config(_Cfg, path)
    with pytest.raises(AvaError, match="nope"):
        load_config(_Cfg, None, nope=1)

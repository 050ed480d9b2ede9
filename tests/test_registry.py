import pytest

from ava.abilities import ABILITIES, ABILITY_KEYS, get_ability
from ava.registry import Registry, RegistryError


def test_lazy_entry_is_imported_on_first_get():
    reg: Registry[object] = Registry("thing")
    reg.register("dumps", "json:dumps", aliases=("to-json",))
    assert reg.names() == ["dumps"]
    import json

    assert reg.get("to-json") is json.dumps
    assert reg.get("dumps") is json.dumps


def test_double_registration_is_refused():
    reg: Registry[int] = Registry("thing")
    reg.register("a", 1, aliases=("b",))
    with pytest.raises(RegistryError, match="already registered"):
        reg.register("b", 2)


def test_unknown_name_suggests_close_matches():
    with pytest.raises(RegistryError) as info:
        get_ability("countng")
    assert "Did you mean 'counting'" in str(info.value)


def test_abilities_by_key_config_name_and_spelling():
    assert len(ABILITY_KEYS) == 14
    assert get_ability("Scene_Classification").key == "scene"
    assert get_ability("fine-grained").key == "fine_grained"
    assert get_ability("ABSOLUTE_DEPTH").key == "abs_depth"


@pytest.mark.parametrize("key", ABILITY_KEYS)
def test_every_ability_is_complete(key):
    a = ABILITIES.get(key)
    assert a.question_templates and a.metric and a.config_name
    assert a.epochs == (20 if key == "localization" else 10)
    if a.answer_kind == "option" and a.fixed_options:
        assert "{options}" in a.question_templates[0]

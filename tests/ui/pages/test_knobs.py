"""Knob tables: nearest allowed values and URL notices that name the field, the range and the value used."""

import param
import pytest

from lab.ui.pages.knobs import (
    Knob,
    apply_url_values,
    bounded_text,
    clamp_link,
    config_overrides,
    groups,
    knob_class,
    nearest_allowed,
)

KNOBS = {
    "depth": Knob(param.Integer(default=8, bounds=(1, 64)), "Model", "model.depth"),
    "alpha_min": Knob(param.Number(default=1.0, bounds=(0.0, 1.0)), "Model", "model.alpha_min"),
    "shortcut": Knob(param.Selector(default="identity", objects=["identity", "linear"]), "Model", "model.shortcut"),
    "n": Knob(param.Integer(default=100, bounds=(10, 1000)), "Data", "data.n", to_config=lambda v, page: v + v % 2),
    "layers": Knob(param.Range(default=(0, 9), bounds=(0, 9)), "View", training=False),
}
Settings = knob_class("Settings", KNOBS, param.Parameterized)


@pytest.mark.parametrize(("name", "value", "used"), [
    ("depth", 99999, 64), ("depth", -3, 1), ("depth", "lots", 8), ("alpha_min", 5, 1.0),
    ("alpha_min", float("nan"), 1.0), ("shortcut", "bogus", "identity"), ("layers", (-5, 20), (0, 9)),
    ("layers", (7, 3), (0, 9))])
def test_nearest_allowed(name, value, used):
    assert nearest_allowed(Settings.param[name], value) == used


def test_url_values_out_of_range_are_replaced_and_named():
    s = Settings()
    notices = apply_url_values(s, {"depth": 99999, "alpha_min": 0.5, "shortcut": "bogus"})
    assert (s.depth, s.alpha_min, s.shortcut) == (64, 0.5, "identity")
    assert set(notices) == {"depth", "shortcut"}
    assert notices["depth"] == "`depth=99999`: depth must be in [1, 64]; using 64."
    assert "shortcut must be one of identity, linear" in notices["shortcut"]


def test_the_table_drives_config_keys_and_groups():
    s = Settings(n=101)
    assert config_overrides(s, KNOBS) == {"model.depth": 8, "model.alpha_min": 1.0, "model.shortcut": "identity",
                                          "data.n": 102}
    assert groups(KNOBS) == {"Model": ["depth", "alpha_min", "shortcut"], "Data": ["n"], "View": ["layers"]}


def test_a_text_value_is_bounded_where_it_arrives_and_quoted_short():
    text = knob_class("Text", {"folder": Knob(bounded_text(chars=20), "Data", "data.root")}, param.Parameterized)
    s = text(folder="a" * 20)
    with pytest.raises(ValueError, match="1,000,000 characters, where at most 20") as err:
        s.folder = "a" * 1_000_000  # from a page's field or a websocket message alike
    assert len(str(err.value)) < 100 and s.folder == "a" * 20
    notices = apply_url_values(s, {"folder": "b" * 1_000_000})  # from the URL: the field's default, said briefly
    assert s.folder == "" and len(notices["folder"]) < 300
    assert "999,887 more characters" in notices["folder"] and "at most 20 characters" in notices["folder"]


def test_a_links_sizes_above_its_limits_are_lowered_and_said():
    lowered, notices = clamp_link({"depth": "900", "n": 50, "alpha_min": "x", "other": 10**9},
                                  {"depth": 16, "n": 100, "alpha_min": 1})
    assert lowered == {"depth": 16}  # 50 is within; "x" is left to the page's own check; "other" has no limit
    assert "`depth=900`: a link may ask at most `16`" in notices["depth"]

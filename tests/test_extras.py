"""What needs an extra of the lab is known from a config alone (the model's registry entry, the data, digits-FD), so a
training that cannot run is refused with the ``pip install`` line before anything is written; a missing module of an
extra names the extra."""

import sys

import pytest
import torch

from lab.config import ExperimentConfig, ModelConfig, load_config
from lab.extras import MissingExtra, installed, missing_extra
from lab.nn import registry
from lab.train.requires import config_extras, missing_extras, require_extras


def hide(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    """Make the top-level ``modules`` (and everything under them) fail to import, as when they are not installed."""
    for name in [*modules, *(n for n in sys.modules if n.split(".")[0] in modules)]:
        monkeypatch.setitem(sys.modules, name, None)


def test_an_extra_is_installed_when_every_module_it_installs_is(monkeypatch):
    assert installed("diffusion") and installed("cluster")  # the test environment has every extra
    hide(monkeypatch, "torchmetrics")
    assert not installed("diffusion") and installed("cluster")
    with pytest.raises(ValueError, match="unknown extra 'gpu'"):
        installed("gpu")


def test_a_missing_module_of_an_extra_names_the_extra_and_its_pip_line():
    missing = missing_extra(ModuleNotFoundError("No module named 'torchmetrics'", name="torchmetrics.image"))
    assert missing.extras == ("diffusion",) and 'pip install "residual-lab[diffusion]"' in str(missing)
    assert missing_extra(missing) is missing
    assert missing_extra(ModuleNotFoundError("No module named 'scipy'", name="scipy")) is None
    assert missing_extra(ImportError("cannot import name 'x'")) is None


def test_the_vpsde_uvit_needs_no_extra_and_digits_fd_needs_diffusion(monkeypatch):
    cfg = load_config("uvit_tiny_digits")
    assert config_extras(cfg) == ()
    measured = load_config("uvit_tiny_digits", ["train.fd_samples=16"])  # digits-FD: torchmetrics' distance
    assert config_extras(measured) == ("diffusion",) and missing_extras(measured) == ()
    require_extras(measured)  # installed here: nothing to refuse
    hide(monkeypatch, "torchmetrics", "torch_fidelity", "diffusers")
    assert missing_extras(cfg) == () and missing_extras(measured) == ("diffusion",)
    require_extras(cfg)
    with pytest.raises(MissingExtra) as refused:
        require_extras(measured)
    assert refused.value.extras == ("diffusion",)
    assert str(refused.value) == ('uvit-tiny-digits (model uvit_tiny) needs the [diffusion] extra: pip install '
                                  '"residual-lab[diffusion]" (or "residual-lab[all]")')


@pytest.fixture
def scratch_registry(monkeypatch):
    """Models registered in a test stay in it."""
    monkeypatch.setattr(registry, "_MODELS", dict(registry._MODELS))
    monkeypatch.setattr(registry, "_INFO", dict(registry._INFO))


def test_a_models_registry_entry_names_the_extras_it_needs_for_its_knobs(scratch_registry, monkeypatch):
    @registry.register_model(requires=("embed",))
    def always(width: int = 4, **kwargs) -> torch.nn.Module:
        return torch.nn.Linear(width, width)

    @registry.register_model(requires=lambda knobs: ("diffusion",) if knobs["schedule"] == "discrete" else ())
    def sometimes(width: int = 4, schedule: str = "discrete") -> torch.nn.Module:
        return torch.nn.Linear(width, width)

    assert registry.model_extras("always") == ("embed",) and registry.model_info("always").requires == ("embed",)
    assert registry.model_extras("sometimes") == ("diffusion",)  # the builder's default fills in
    assert registry.model_extras("sometimes", {"schedule": "vpsde"}) == ()
    assert registry.model_extras("residual_mlp") == ()
    with pytest.raises(ValueError, match="extras the lab does not have \\('gpu'\\)"):
        registry.register_model(requires=("gpu",))

    @registry.register_model(requires=lambda knobs: ("gpu",))
    def wrong() -> torch.nn.Module:
        return torch.nn.Identity()

    with pytest.raises(ValueError, match="model 'wrong' names extras the lab does not have"):
        registry.model_extras("wrong")
    cfg = ExperimentConfig(name="mine", model=ModelConfig(name="sometimes", extra=(("schedule", "vpsde"),)))
    assert config_extras(cfg) == ()
    cfg = ExperimentConfig(name="mine", model=ModelConfig(name="always"))
    assert config_extras(cfg) == ("embed",)
    hide(monkeypatch, "umap")
    with pytest.raises(MissingExtra, match='mine \\(model always\\) needs the \\[embed\\] extra: pip install '
                                           '"residual-lab\\[embed\\]"'):
        require_extras(cfg)

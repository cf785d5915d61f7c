import warnings

import pytest

from lab.config import (
    CONFIGS,
    ConfigError,
    DataConfig,
    ExperimentConfig,
    ModelConfig,
    TrainConfig,
    apply_overrides,
    config_path,
    from_dict,
    load_config,
    packaged_configs,
    save_config,
)


def test_defaults_validate_and_round_trip_yaml(tmp_path):
    cfg = apply_overrides(ExperimentConfig(), ["model.depth=16", "train.lr=0.005", "train.betas=[0.8, 0.99]"])
    assert cfg.model.depth == 16 and cfg.train.lr == 0.005 and cfg.train.betas == (0.8, 0.99)
    for suffix in ("yaml", "json"):
        save_config(cfg, tmp_path / f"c.{suffix}")
        assert load_config(tmp_path / f"c.{suffix}") == cfg


def test_shipped_configs_load():
    lab_default = load_config("configs/spiral.yaml")
    paper = load_config("configs/spiral_residual_droppath.yaml")
    assert (paper.model.depth, paper.model.width, paper.model.activation) == (32, 32, "gelu")
    assert (paper.train.lr, paper.train.betas, paper.train.batch_size, paper.train.epochs) == (
        0.1, (0.9, 0.999), 256, 1000)
    assert paper.data.n == 16384 and lab_default.data.n == 16384
    assert lab_default == ExperimentConfig(name="spiral"), "the lab default config is the dataclass default"


def test_unknown_key_names_itself_and_valid_keys():
    with pytest.raises(ConfigError, match=r"unknown key model\.alpha_mni.*model\.alpha_min"):
        apply_overrides(ExperimentConfig(), ["model.alpha_mni=0.5"])
    with pytest.raises(ConfigError, match=r"unknown key modle\.depth.*valid keys: .*model"):
        apply_overrides(ExperimentConfig(), ["modle.depth=3"])
    with pytest.raises(ConfigError, match="unknown key train.foo"):
        load_config(None, {"train.foo": 1})


def test_unknown_key_in_yaml(tmp_path):
    (tmp_path / "bad.yaml").write_text("model:\n  depht: 3\n")
    with pytest.raises(ConfigError, match=r"unknown key model\.depht; valid keys: .*model\.depth"):
        load_config(tmp_path / "bad.yaml")


@pytest.mark.parametrize(("override", "pattern"), [
    ("model.alpha_min=1.5", r"model\.alpha_min must be in \[0\.0, 1\.0\]; got 1\.5"),
    ("model.alpha_min=-0.1", r"model\.alpha_min must be in \[0\.0, 1\.0\]; got -0\.1"),
    ("model.depth=0", r"model\.depth must be in \[1, 1024\]; got 0"),
    ("model.width=0", r"model\.width must be in \[1, 65536\]; got 0"),
    ("train.lr=0", r"train\.lr must be in \(0\.0, 100\.0\]; got 0"),
    ("train.batch_size=0", r"train\.batch_size must be >= 1; got 0"),
    ("data.noise=-1", r"data\.noise must be in \[0\.0, 10\.0\]; got -1"),
    ("model.shortcut=decayed", r"model\.shortcut must be one of identity, linear"),
    ("model.depth=2.5", r"model\.depth must be an integer; got 2\.5"),
    ("model.zero_init=3", r"model\.zero_init must be true or false"),
    ("train.lr=.nan", r"train\.lr must be a finite number"),
    ("train.betas=[0.9]", r"train\.betas must have 2 values"),
    ("train.weight_decay_on=biases", r"train\.weight_decay_on must be one of weights, all"),
])
def test_out_of_range_values_name_field_range_and_value(override, pattern):
    with pytest.raises(ConfigError, match=pattern):
        apply_overrides(ExperimentConfig(), [override])


def test_direct_construction_validates():
    with pytest.raises(ConfigError, match="alpha_min"):
        ModelConfig(alpha_min=2.0)
    with pytest.raises(ConfigError, match="train_fraction"):
        DataConfig(train_fraction=0.0)
    with pytest.raises(ConfigError, match="drop_path_rate must be < 1"):
        TrainConfig(droppath="droppath", drop_path_rate=1.0)


def test_yaml_one_one_booleans_stay_strings_where_a_string_is_meant():
    cfg = apply_overrides(ExperimentConfig(), ["train.droppath=off", "model.zero_init=true"])
    assert cfg.train.droppath == "off" and cfg.model.zero_init is True
    with pytest.raises(ConfigError, match="model.zero_init must be true or false; got 'yes'"):
        apply_overrides(ExperimentConfig(), ["model.zero_init=yes"])


def test_malformed_override():
    with pytest.raises(ConfigError, match="section.key=value"):
        apply_overrides(ExperimentConfig(), ["model.depth"])


def test_missing_file():
    with pytest.raises(ConfigError, match="config file not found") as err:
        load_config("configs/does-not-exist.yaml")
    assert "spiral_residual_droppath" in str(err.value)  # the packaged configs it could have meant


def test_a_packaged_config_goes_by_name_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no configs/ here
    assert {"spiral", "mae_vit_b16_in1k", "uvit_tiny_digits"} <= set(packaged_configs())
    for name in ("spiral", "spiral.yaml", "configs/spiral.yaml"):
        assert config_path(name) == CONFIGS / "spiral.yaml", name
    assert load_config("spiral_residual_droppath").train.lr == 0.1
    (tmp_path / "spiral.yaml").write_text("model:\n  depth: 3\n")  # a file of that name here is what it names
    assert config_path("spiral.yaml").resolve() == (tmp_path / "spiral.yaml").resolve()
    assert load_config("spiral.yaml").model.depth == 3
    with pytest.raises(ConfigError, match="config file not found"):
        config_path("elsewhere/spiral.yaml")  # a path with another folder is a path, never a packaged name


# ---------------------------------------------------------------- train.drop_rate, renamed train.drop_path_rate

RENAMED = "train.drop_rate is deprecated; it is the drop-path rate and is now called train.drop_path_rate"


def test_old_drop_rate_key_loads_as_drop_path_rate_with_a_warning(tmp_path):
    (tmp_path / "old.yaml").write_text("train:\n  droppath: droppath\n  drop_rate: 0.3\n")
    (tmp_path / "old.json").write_text('{"train": {"droppath": "droppath", "drop_rate": 0.3}}')
    expected = apply_overrides(ExperimentConfig(), ["train.droppath=droppath", "train.drop_path_rate=0.3"])
    loaders = [
        lambda: load_config(tmp_path / "old.yaml"),
        lambda: load_config(tmp_path / "old.json"),
        lambda: load_config(None, ["train.droppath=droppath", "train.drop_rate=0.3"]),
        lambda: load_config(None, {"train.droppath": "droppath", "train.drop_rate": 0.3}),
        lambda: from_dict(ExperimentConfig, {"train": {"droppath": "droppath", "drop_rate": 0.3}}),
    ]
    for load in loaders:
        with pytest.warns(DeprecationWarning) as record:
            cfg = load()
        assert [str(w.message) for w in record] == [RENAMED]
        assert cfg == expected and cfg.train.drop_path_rate == 0.3
    with pytest.warns(DeprecationWarning, match="now called train.drop_path_rate"):
        assert from_dict(TrainConfig, {"drop_rate": 0.2}).drop_path_rate == 0.2


def test_warning_points_at_the_caller():
    with pytest.warns(DeprecationWarning) as record:
        load_config(None, ["train.drop_rate=0.1"])
    assert record[0].filename == __file__


def test_old_and_new_drop_rate_keys_together_are_an_error(tmp_path):
    (tmp_path / "both.yaml").write_text("train:\n  drop_rate: 0.3\n  drop_path_rate: 0.3\n")
    attempts = {
        "yaml": lambda: load_config(tmp_path / "both.yaml"),
        "overrides": lambda: load_config(None, ["train.drop_rate=0.3", "train.drop_path_rate=0.3"]),
        "mapping": lambda: load_config(None, {"train.drop_path_rate": 0.3, "train.drop_rate": 0.2}),
        "from_dict": lambda: from_dict(ExperimentConfig, {"train": {"drop_rate": 0.3, "drop_path_rate": 0.3}}),
    }
    for attempt in attempts.values():
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)  # refused outright, not half-accepted with a warning
            with pytest.raises(ConfigError, match=r"train\.drop_rate and train\.drop_path_rate are both given"):
                attempt()


def test_drop_path_rate_round_trips_and_is_saved_under_its_new_name(tmp_path):
    with pytest.warns(DeprecationWarning):
        cfg = load_config(None, ["train.droppath=residual_droppath", "train.drop_rate=0.25"])
    for suffix in ("yaml", "json"):
        path = tmp_path / f"c.{suffix}"
        save_config(cfg, path)
        text = path.read_text()
        assert "drop_path_rate" in text and "drop_rate" not in text
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)  # the saved file uses the new key only
            loaded = load_config(path)
        assert loaded == cfg and loaded.train.drop_path_rate == 0.25


def test_image_models_take_their_own_keys_and_no_others():
    cfg = load_config("configs/ra_fc_digits.yaml", ["model.preact=true", "model.norm=none"])
    assert cfg.model.builder_kwargs() == {"depth": 8, "width": 128, "shortcut": "identity", "preact": True,
                                          "norm": "none"}
    with pytest.raises(ConfigError, match=r"unknown key model\.foo; valid keys: .*model\.preact.*\(model fc_resnet\)"):
        apply_overrides(cfg, ["model.foo=1"])
    with pytest.raises(ConfigError, match=r"model conv_resnet does not take model\.depth; its keys: .*model\.depths"):
        load_config(None, {"model.name": "conv_resnet", "model.depth": 8})
    with pytest.raises(ConfigError, match=r"model\.preact must be true or false; got 'yes'"):
        apply_overrides(cfg, ["model.preact=yes"])
    with pytest.raises(ConfigError, match=r"model\.drop_path_rate is set by train\.drop_path_rate"):
        apply_overrides(cfg, ["model.drop_path_rate=0.1"])
    with pytest.raises(ConfigError, match=r"model\.name: unknown model 'resnet9000'"):
        apply_overrides(cfg, ["model.name=resnet9000"])


def test_switching_model_drops_the_keys_the_new_model_does_not_take(tmp_path):
    cfg = apply_overrides(ExperimentConfig(), ["model.name=conv_resnet", "model.depths=[2, 2]",
                                               "model.channels=[8, 16]", "data.name=digits"])
    assert cfg.model.depth is None and cfg.model.width is None, "the toy MLP's depth and width are not conv keys"
    assert cfg.model.activation == "gelu", "a key both models take is kept"
    assert dict(cfg.model.extra) == {"depths": (2, 2), "channels": (8, 16)}
    assert cfg.model.get("feature_size") == 16 and cfg.model.get("depths") == (2, 2)
    save_config(cfg, tmp_path / "c.yaml")
    assert load_config(tmp_path / "c.yaml") == cfg
    with pytest.raises(ConfigError, match="does not take model.depth"):
        apply_overrides(ExperimentConfig(), ["model.name=conv_resnet", "model.depth=4"])


def test_switching_model_says_which_keys_it_drops_and_whose():
    with pytest.warns(UserWarning, match=r"model\.name=conv_resnet replaces residual_mlp: dropped model\.depth=32, "
                                         r"model\.width=32 \(conv_resnet does not take them\)") as caught:
        apply_overrides(ExperimentConfig(), ["model.name=conv_resnet", "data.name=digits"])
    assert caught[0].filename == __file__, "the warning points at the line that switched the model"
    with pytest.warns(UserWarning, match=r"dropped model\.depth=32, model\.width=32, model\.activation='gelu', "
                                         r"model\.shortcut='identity', model\.alpha_min=1\.0 \(timm_resnet18"):
        load_config(None, {"model.name": "timm_resnet18"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing dropped, nothing said
        apply_overrides(ExperimentConfig(), {"model.name": "ra_type1"})
        apply_overrides(ExperimentConfig(), {"model.name": "conv_resnet", "model.depth": None, "model.width": None,
                                             "data.name": "digits"})


def test_learning_rate_schedule_fields_are_checked():
    with pytest.raises(ConfigError, match="warmup_cosine needs train.warmup_steps > 0"):
        TrainConfig(lr_schedule="warmup_cosine")
    with pytest.raises(ConfigError, match=r"train\.lr_schedule must be one of constant, cosine, warmup_cosine"):
        TrainConfig(lr_schedule="step")
    with pytest.raises(ConfigError, match=r"train\.min_lr \(0\.5\) must not exceed train\.lr"):
        TrainConfig(lr=0.1, min_lr=0.5, lr_schedule="cosine")


def test_a_float_in_scientific_notation_is_a_number_in_overrides_and_yaml(tmp_path):
    """YAML 1.1 reads ``1e-3`` as a string; the config reads it as the number it means."""
    assert load_config(None, ["train.lr=1e-3"]).train.lr == 1e-3
    path = tmp_path / "c.yaml"
    path.write_text("train:\n  lr: 1.5e-4\n  min_lr: 1e-6\n")
    cfg = load_config(path)
    assert (cfg.train.lr, cfg.train.min_lr) == (1.5e-4, 1e-6)
    with pytest.raises(ConfigError, match="must be a number"):
        load_config(None, ["train.lr=fast"])


def test_a_timm_model_does_not_inherit_the_default_models_depth_and_width():
    cfg = load_config(None, {"model.name": "timm_resnet50d"})
    assert cfg.model.depth is None and cfg.model.width is None and cfg.model.builder_kwargs() == {}
    assert load_config(None, {"model.name": "timm_resnet50d", "model.zero_init": True}).model.zero_init is True


def test_the_task_fits_the_model_and_droppath_needs_drop_paths():
    with pytest.raises(ConfigError, match="is a classifier"):
        load_config(None, {"train.task": "mae", "model.name": "timm_resnet18"})
    with pytest.raises(ConfigError, match="no classifier head"):
        load_config(None, {"model.name": "mae_vit_tiny_patch4_32"})
    with pytest.raises(ConfigError, match="train.task=mae cannot train uvit_tiny, which is a diffusion model"):
        load_config(None, {"model.name": "uvit_tiny", "train.task": "mae"})
    with pytest.raises(ConfigError, match="which is a classifier: set train.task=classify"):
        load_config(None, {"train.task": "diffusion"})
    with pytest.raises(ConfigError, match="model.num_classes=0 means an unconditional diffusion model"):
        load_config(None, {"model.num_classes": 0})
    with pytest.raises(ConfigError, match="train.task=diffusion trains with the loader engine"):
        load_config("configs/uvit_tiny_digits.yaml", {"train.engine": "tensor"})
    with pytest.raises(ConfigError, match="train.ema must be below 1"):
        load_config(None, {"train.ema": 1.0})
    assert load_config("configs/uvit_tiny_digits.yaml").model.num_classes == 0
    with pytest.raises(ConfigError, match="has no drop paths"):
        load_config(None, {"model.name": "mae_vit_tiny_patch4_32", "train.task": "mae",
                           "train.droppath": "residual_droppath", "train.drop_path_rate": 0.1})
    assert load_config(None, {"model.name": "mae_vit_tiny_patch4_32", "train.task": "mae"}).train.task == "mae"


def test_weight_decay_spares_norms_and_biases_unless_a_config_asks_for_all():
    """timm's rule by default; the Residual Alignment configs decay every parameter (the paper's Eq. 1)."""
    assert TrainConfig().weight_decay_on == "weights"
    for name in ("ra_fc_digits", "ra_type1", "ra_type2", "ra_type3", "ra_type4", "ra_type5"):
        assert load_config(f"configs/{name}.yaml").train.weight_decay_on == "all", name
    for name in ("mae_tiny", "resnet50d_rdp_cifar10", "spiral"):
        assert load_config(f"configs/{name}.yaml").train.weight_decay_on == "weights", name


@pytest.mark.parametrize("overrides", [{"data.name": "mnist", "data.image_size": 0},
                                       {"data.name": "image_folder", "data.root": "x"}])
def test_digits_fd_during_training_is_only_for_diffusion_models_of_the_digits(overrides):
    base = load_config("configs/uvit_tiny_digits.yaml")
    assert apply_overrides(base, {"train.fd_samples": 100}).train.fd_samples == 100
    with pytest.raises(ConfigError, match="train.fd_samples measures digits-FD, of a diffusion model of the digits"):
        apply_overrides(base, {**overrides, "train.fd_samples": 100})

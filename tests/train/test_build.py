import pytest
import torch

from lab.config import load_config
from lab.data.images import DatasetNotFoundError
from lab.data.keyed import IMAGENET_MEAN, IMAGENET_STD
from lab.nn.resnets import ConvResNet, FCResNet
from lab.train import build_data, build_model
from lab.train.build import pixel_scale, raw_images
from lab.train.runner import make_trainer


def test_digits_are_standardised_and_size_the_model():
    cfg = load_config("configs/ra_fc_digits.yaml", ["model.depth=2", "model.width=16"])
    data = build_data(cfg)
    assert data.x_train.shape[1:] == (1, 8, 8) and data.num_classes == 10
    assert len(data.x_test) == pytest.approx(0.2 * 1797, abs=15)
    assert abs(data.x_train.mean().item()) < 1e-4 and data.x_train.std().item() == pytest.approx(1.0, abs=1e-3)
    model = build_model(cfg, data)
    assert isinstance(model, FCResNet) and model.stem[1].in_features == 64 and model.head.out_features == 10
    assert model(data.x_test[:3]).shape == (3, 10)


def test_pixel_scale_maps_the_raw_images_onto_what_the_model_sees():
    cfg = load_config("configs/uvit_tiny_digits.yaml")
    raw, data = raw_images(cfg), build_data(cfg)
    mean, std = pixel_scale(cfg)
    assert raw.x_train.min() >= 0 and raw.x_train.max() <= 1 and len(mean) == len(std) == 1
    assert torch.allclose((raw.x_train - mean[0]) / std[0], data.x_train, atol=1e-6)
    folder = load_config("configs/uvit_small_cifar100.yaml")
    assert pixel_scale(folder) == ((0.5,) * 3, (0.5,) * 3), "the U-ViT reference reads pixels into [-1, 1]"
    folder = load_config("configs/uvit_small_cifar100.yaml", ["data.normalize=imagenet"])
    assert pixel_scale(folder) == (IMAGENET_MEAN, IMAGENET_STD), "files are read with ImageNet's statistics"
    with pytest.raises(ValueError, match="toy set"):
        raw_images(load_config())  # the default: the spiral


def test_conv_model_reads_its_channels_off_the_data_and_takes_drop_path_from_train():
    cfg = load_config("configs/ra_fc_digits.yaml", ["model.name=conv_resnet", "model.depths=[2]",
                                                    "model.channels=[4]", "model.feature_size=8",
                                                    "train.droppath=droppath", "train.drop_path_rate=0.3"])
    model = build_model(cfg)
    assert isinstance(model, ConvResNet) and model.stem[0].in_channels == 1
    assert all(b.drop_path.rate == pytest.approx(0.3) for _, b in model.iter_blocks())


def test_lr_schedule_is_applied_per_step():
    cfg = load_config("configs/ra_fc_digits.yaml", ["model.depth=1", "model.width=8", "train.max_steps=10"])
    trainer = make_trainer(cfg)
    seen = []
    for _ in range(3):
        idx = trainer.batch_indices(trainer.step)
        trainer.train_step(trainer.data.x_train[idx], trainer.data.y_train[idx])
        seen.append(trainer.optimizer.param_groups[0]["lr"])
        trainer.step += 1
    assert seen[0] == pytest.approx(0.05) and seen[0] > seen[1] > seen[2]


def test_image_sets_read_from_a_folder_say_what_is_missing(tmp_path):
    with pytest.raises(ValueError, match="read from a local folder"):
        build_data(load_config("configs/ra_fc_digits.yaml", ["data.name=mnist"]))
    with pytest.raises(DatasetNotFoundError, match="not found"):
        build_data(load_config("configs/ra_fc_digits.yaml", ["data.name=cifar10", f"data.root={tmp_path}"]))


def test_image_folder_data_trains(tmp_path):
    from lab.data.images import make_synthetic_image_folder

    make_synthetic_image_folder(tmp_path / "imgs", classes=3, per_class=6, size=8)
    cfg = load_config("configs/ra_fc_digits.yaml", ["data.name=image_folder", f"data.root={tmp_path / 'imgs'}",
                                                    "data.image_size=8", "model.depth=1", "model.width=8",
                                                    "train.max_steps=2"])
    data = build_data(cfg)
    assert data.x_train.shape[1:] == (3, 8, 8) and data.num_classes == 3
    assert torch.isfinite(torch.tensor(make_trainer(cfg).fit()["train_loss"]))

"""The rules the three trainers share: the face callbacks see, the seeds, drop-path modes and the end of a run."""

import torch

from lab.config import ExperimentConfig, apply_overrides
from lab.seeds import epoch_seed
from lab.train import EnsembleTrainer, Trainable, Trainer, TrainerView, build_data, build_model
from lab.train.build import loader_data
from lab.train.core import batch_schedule, droppath_mode
from lab.train.distributed import World
from lab.train.loader import LoaderTrainer


def small(**overrides) -> ExperimentConfig:
    base = {"model.depth": 2, "model.width": 8, "data.n": 256, "train.batch_size": 64, "data.workers": 0}
    return apply_overrides(ExperimentConfig(), {**base, **overrides})


def test_every_trainer_shows_callbacks_the_same_face():
    cfg = small()
    data = build_data(cfg)
    tensor = Trainer(build_model(cfg, data), data, cfg.train)
    loader_cfg = small(**{"train.engine": "loader"})
    ldata = loader_data(loader_cfg)
    loader = LoaderTrainer(build_model(loader_cfg, ldata), ldata, loader_cfg.train, loader_cfg.data, World())
    member = EnsembleTrainer([cfg], data=data).members[0]
    for trainer in (tensor, loader, member):
        assert isinstance(trainer, TrainerView), type(trainer).__name__
    assert isinstance(tensor, Trainable) and isinstance(loader, Trainable)
    assert not isinstance(member, Trainable)  # a member is resumed by a solo trainer from its checkpoint


def test_tensor_trainer_draws_each_epoch_from_the_epoch_seed():
    cfg = small(**{"train.seed": 7})
    data = build_data(cfg)
    trainer = Trainer(build_model(cfg, data), data, cfg.train)
    perm = torch.randperm(len(data.x_train), generator=torch.Generator().manual_seed(epoch_seed(7, 1)))
    assert torch.equal(trainer.batch_indices(trainer.steps_per_epoch), perm[:trainer.batch_size])


def test_droppath_modes_alternate_for_residual_droppath():
    rdp = small(**{"train.droppath": "residual_droppath", "train.drop_path_rate": 0.5}).train
    assert [droppath_mode(rdp, s) for s in range(4)] == ["rdp_drop", "rdp_train", "rdp_drop", "rdp_train"]
    assert droppath_mode(small(**{"train.droppath": "droppath"}).train, 1) == "droppath"
    assert droppath_mode(small().train, 0) == "off"


def test_batch_schedule_drops_the_partial_batch_only_for_residual_droppath():
    assert batch_schedule(small(**{"train.epochs": 3}).train, 200) == (64, 4, 12)
    rdp = small(**{"train.droppath": "residual_droppath", "train.epochs": 3, "train.max_steps": 7}).train
    assert batch_schedule(rdp, 200) == (64, 3, 7)



def test_a_run_never_asks_for_more_threads_than_the_machine_has(monkeypatch):
    """A config from a large node, or from someone else's run folder (``train.threads=1000000`` made the next fork on
    the machine fail), trains on at most this process's cores; a count past any machine is refused when read."""
    import pytest

    from lab.config import ConfigError
    from lab.train.core import cpu_threads, machine_cores

    with pytest.raises(ConfigError, match="train.threads"):
        small(**{"train.threads": 1_000_000})
    cfg = small(**{"train.threads": 4096})  # allowed by the config, then cut to the cores there are
    before = torch.get_num_threads()
    try:
        Trainer(build_model(cfg, build_data(cfg)), build_data(cfg), cfg.train)
        assert torch.get_num_threads() == machine_cores() == cpu_threads(4096) <= 4096
        monkeypatch.setattr("lab.train.core.machine_cores", lambda: 1)
        assert cpu_threads(4096) == 1 and cpu_threads(0) == 0
        EnsembleTrainer([cfg], data=build_data(cfg))
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)

"""The seed rule: the values every run of the lab has drawn with (changing them changes every run)."""

from lab.seeds import epoch_seed, sample_seed, step_seed


def test_seeds_are_functions_of_the_run_seed_and_position():
    assert epoch_seed(0, 3) == 3 and epoch_seed(2, 3) == 2 * 1_000_003 + 3
    assert step_seed(2, 5, rank=1) == (2 * 1_000_003 + 5) * 1_009 + 1
    assert len({step_seed(s, t, r) for s in range(3) for t in range(50) for r in range(4)}) == 3 * 50 * 4
    assert sample_seed(2, 3, 4) == (2 * 1_000_003 + 3) * 10_000_019 + 4
    assert len({sample_seed(s, e, i) for s in range(3) for e in range(20) for i in range(100)}) == 3 * 20 * 100


def test_the_seeds_derived_from_the_largest_run_seed_fit_torch():
    import torch

    from lab.seeds import SEED_MAX

    for seed in (epoch_seed(SEED_MAX, 10**6), step_seed(SEED_MAX, 10**9, 4095), sample_seed(SEED_MAX, 10**4, 10**7)):
        assert 0 <= seed < 2**64
        torch.Generator().manual_seed(seed)
    assert sample_seed(1_000, 7, 5) == (1_000 * 1_000_003 + 7) * 10_000_019 + 5  # below 2**64: as it always was

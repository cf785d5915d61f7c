"""Snapshots built beside training: from a copy of the model taken between steps, on the builder thread."""

import threading

import pytest
import torch

from lab.snapshots.shadow import ShadowBuilds


def _model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.BatchNorm1d(3))


def test_a_build_sees_the_model_as_it_was_when_submitted_while_the_model_trains_on():
    model, builds = _model(), ShadowBuilds()
    started, release, seen = threading.Event(), threading.Event(), []

    def build(shadow: torch.nn.Module) -> None:
        started.set()
        release.wait(10)
        seen.append({k: v.clone() for k, v in shadow.state_dict().items()})

    before = {k: v.clone() for k, v in model.state_dict().items()}
    builds.submit(model, build)
    assert started.wait(10)
    with torch.no_grad():  # a training step lands while the snapshot is being built
        model[0].weight.add_(1.0)
        model[1].running_mean.add_(1.0)  # buffers are part of the state too
    assert not builds.idle()
    with pytest.raises(RuntimeError, match="still being built"):
        builds.submit(model, build)
    release.set()
    builds.drain()
    assert seen[0].keys() == before.keys()
    for key, value in before.items():
        assert torch.equal(seen[0][key], value), key

    builds.submit(model, build)  # the next copy: the trained state, into the same shadow
    builds.drain()
    assert torch.equal(seen[1]["0.weight"], model[0].weight) and torch.equal(seen[1]["1.running_mean"],
                                                                              model[1].running_mean)
    builds.close()


def test_a_failing_build_fails_the_submitting_thread_at_its_next_call():
    builds = ShadowBuilds()
    builds.submit(_model(), lambda shadow: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        builds.drain()
    assert builds.idle()  # raised once: the builder thread goes on
    builds.close()


def test_close_ends_the_builder_thread():
    before, builds = set(threading.enumerate()), ShadowBuilds()
    builds.submit(_model(), lambda shadow: None)
    assert set(threading.enumerate()) - before  # the builder thread
    builds.close()
    assert set(threading.enumerate()) <= before

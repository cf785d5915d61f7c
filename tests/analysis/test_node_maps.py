import numpy as np
import torch

from lab.analysis.node_maps import layer_weights, node_maps
from lab.data import grid
from lab.nn import ResidualMLP


def test_node_maps_shapes_and_values():
    model = ResidualMLP(depth=3, width=5).train()
    arrays = node_maps(model, resolution=20, limit=1.5)
    assert model.training  # restored
    assert arrays.maps.shape == (4, 5, 20, 20) and arrays.maps.dtype == np.float32
    assert arrays.decision.shape == (20, 20) and arrays.weights.shape == (4, 5, 5)
    pts = grid(20, 1.5)
    with torch.no_grad():
        _, states = model.eval().forward_intermediates(pts)
        probs = torch.softmax(model(pts), 1)[:, 1]
    # node k of layer l at grid point (row i, col j) is that point's residual-stream value
    assert np.allclose(arrays.maps[2, 3], states[2][:, 3].reshape(20, 20).numpy(), atol=1e-6)
    assert np.allclose(arrays.decision, probs.reshape(20, 20).numpy(), atol=1e-6)
    # the stem is linear: its maps are planes
    stem_w, stem_b = model.stem.weight.detach(), model.stem.bias.detach()
    assert np.allclose(arrays.maps[0, 1], (pts @ stem_w[1] + stem_b[1]).reshape(20, 20).numpy(), atol=1e-5)


def test_layer_weights_are_stem_then_branches():
    model = ResidualMLP(depth=2, width=4)
    w = layer_weights(model)
    assert w.shape == (3, 4, 4)
    assert np.allclose(w[0, :, :2], model.stem.weight.detach().numpy()) and np.all(w[0, :, 2:] == 0)
    assert np.allclose(w[2], model.blocks[1].branch.fc.weight.detach().numpy())

"""``python -m lab fid``: the Fréchet distance of a diffusion run's samples, in a digits classifier's features
(digits-FD) or in the FID Inception's from a local weights file; the distance itself against its formula; clear
refusals that write nothing."""

import json

import numpy as np
import pytest
import scipy.linalg
import torch

from lab.analysis.digits_features import digits_classifier
from lab.cli import main
from lab.data.readers import load_digits, write_digits_folder
from lab.reports.fid import folder_pixels, frechet_distance
from tests.reports.conftest import UNCOND_STEPS


def _formula(a: np.ndarray, b: np.ndarray) -> float:
    """‖μ_a − μ_b‖² + tr(Σ_a + Σ_b − 2 (Σ_a Σ_b)^½), written out with SciPy's matrix square root."""
    mu_a, mu_b = a.mean(0), b.mean(0)
    cov_a, cov_b = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    root = scipy.linalg.sqrtm(cov_a @ cov_b).real
    return float(((mu_a - mu_b) ** 2).sum() + np.trace(cov_a + cov_b - 2 * root))


def test_digits_fd_is_the_frechet_formula_in_the_classifiers_features():
    judge = digits_classifier(8)
    assert judge.test_accuracy > 0.9, "the features must separate the digits"
    digits = load_digits(image_size=8, seed=0)
    noise = torch.rand(300, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    held_out = frechet_distance(judge, [digits.x_train], digits.x_test.split(64))
    off = frechet_distance(judge, [digits.x_train], [noise])
    with torch.no_grad():
        feats = [judge(x).double().numpy() for x in (digits.x_train, digits.x_test, noise)]
    assert held_out == pytest.approx(_formula(feats[0], feats[1]), rel=1e-4)
    assert off == pytest.approx(_formula(feats[0], feats[2]), rel=1e-4)
    assert off > 10 * held_out, (held_out, off)


def test_a_folder_of_image_files_is_read_as_the_pixels_it_holds(tmp_path):
    root = write_digits_folder(tmp_path / "digits", image_size=8)
    pixels = folder_pixels(root / "train", channels=1, size=8)
    digits = load_digits(image_size=8, seed=0)
    assert pixels.shape == digits.x_train.shape
    # the same images up to 8-bit rounding (the folder lists them class by class)
    assert torch.allclose(pixels.flatten(1).sum(1).sort().values, digits.x_train.flatten(1).sum(1).sort().values,
                          atol=64 / 255)
    rgb = folder_pixels(root / "val", channels=3, size=12, limit=5)
    assert rgb.shape == (5, 3, 12, 12) and torch.equal(rgb[:, 0], rgb[:, 2])
    with pytest.raises(FileNotFoundError, match="holds no image files"):
        folder_pixels(tmp_path, channels=1, size=8, limit=0)


def test_lab_fid_appends_digits_fd_measurements(diffusion_runs, tmp_path, capsys):
    run = diffusion_runs["uncond"]
    args = ["fid", str(run), "--features", "digits-classifier", "--num", "64", "--steps", "4", "--no-progress"]
    assert main([*args, "--reference", "digits"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("digits-FD ") and f"at step {UNCOND_STEPS} (64 samples, ode 4 steps, ema weights" in out
    assert "fid.json" in err
    folder = write_digits_folder(tmp_path / "digits", image_size=8)
    assert main([*args, "--reference", str(folder / "train")]) == 0
    first, second = json.loads((run / "analysis" / "fid.json").read_text())["measurements"]
    train = load_digits(image_size=8, seed=0, test_fraction=0.1).x_train  # the run's split (data.train_fraction)
    assert first["metric"] == second["metric"] == "digits-FD" and first["reference_images"] == len(train)
    assert first["value"] > 0 and first["classifier_accuracy"] > 0.9
    assert second["value"] == pytest.approx(first["value"], rel=0.05), "the training digits, as files"
    # a measurement file that cannot be read stops the command before any work and is left as it was
    (run / "analysis" / "fid.json").write_text('{"measurements": [')
    assert main([*args, "--reference", "digits"]) == 2
    assert "cannot be read" in capsys.readouterr().err
    assert (run / "analysis" / "fid.json").read_text() == '{"measurements": ['
    (run / "analysis" / "fid.json").unlink()  # the next measurement starts a new file


@pytest.mark.parametrize(("which", "args", "message"), [
    ("classifier", ["--reference", "digits", "--features", "digits-classifier"], "only diffusion runs"),
    ("uncond", ["--reference", "nowhere", "--features", "digits-classifier"], "'nowhere' does not exist"),
    ("uncond", ["--reference", "digits"], "pass --inception-weights PATH, torch-fidelity's weights-inception"),
    ("uncond", ["--reference", "digits", "--inception-weights", "missing.pth"], "do not exist"),
    ("uncond", ["--reference", "digits", "--inception-weights", "configs"], "name a folder; give the weights file"),
    ("uncond", ["--reference", "digits", "--features", "digits-classifier", "--num", "1000000000"],
     "is more than the 100,000 samples one command draws"),
    ("uncond", ["--reference", "digits", "--features", "digits-classifier", "--guidance", "nan"],
     "--guidance must be a finite scale"),
])
def test_lab_fid_refuses_clearly(diffusion_runs, capsys, which, args, message):
    run = diffusion_runs[which]
    measurements = run / "analysis" / "fid.json"
    before = measurements.read_bytes() if measurements.exists() else None
    assert main(["fid", str(run), "--num", "4", "--steps", "1", *args, "--no-progress"]) == 2
    assert message in capsys.readouterr().err
    assert (measurements.read_bytes() if measurements.exists() else None) == before


@pytest.fixture(scope="module")
def inception_weights(tmp_path_factory):
    """A randomly initialised FID Inception's state dict, saved as the real weights file would be."""
    import torch_fidelity.feature_extractor_inceptionv3 as fidelity

    with pytest.MonkeyPatch.context() as patch:  # the library's constructor would download its weights
        patch.setattr(fidelity, "load_state_dict_from_url", lambda *a, **k: {})
        patch.setattr(fidelity.FeatureExtractorInceptionV3, "load_state_dict", lambda self, state: None)
        torch.manual_seed(0)
        state = fidelity.FeatureExtractorInceptionV3("inception-v3-compat", ["2048"]).state_dict()
    path = tmp_path_factory.mktemp("weights") / "inception.pth"
    torch.save(state, path)
    return path


def test_lab_fid_measures_in_the_inception_of_a_local_weights_file(diffusion_runs, inception_weights, tmp_path,
                                                                   capsys):
    run = diffusion_runs["uncond"]
    reference = write_digits_folder(tmp_path / "digits", image_size=8, every=100)  # 14 training images
    assert main(["fid", str(run), "--reference", str(reference / "train"), "--inception-weights",
                 str(inception_weights), "--num", "6", "--steps", "2", "--no-progress"]) == 0
    assert capsys.readouterr().out.startswith("FID ")
    measurement = json.loads((run / "analysis" / "fid.json").read_text())["measurements"][-1]
    assert measurement["metric"] == "FID" and measurement["reference_images"] == 14
    assert np.isfinite(measurement["value"]) and "classifier_accuracy" not in measurement
    # a weights file that is no state dict, or one that would run code when unpickled, is refused
    torch.save({"net": [1, 2]}, tmp_path / "list.pth")
    torch.save({"weights": torch.nn.Linear(2, 2)}, tmp_path / "module.pth")
    for bad, message in (("list.pth", "hold no state dict"), ("module.pth", "not a readable state dict")):
        assert main(["fid", str(run), "--reference", "digits", "--inception-weights", str(tmp_path / bad),
                     "--num", "4", "--steps", "1", "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert message in err and "weights_only=False" not in err, "never the advice to unpickle it whole"

"""Weights written elsewhere (timm's, torchvision's, a DDP run's, a release's ``{"model": …}``), loaded safely: only
tensors, the common layouts unwrapped, every key that does not fit named."""

import hashlib
import io
import json
import os
import struct
import zipfile

import pytest
import timm
import torch
import torchvision
from safetensors.torch import save_file

from lab.data.roots import open_data_file
from lab.nn import weights
from lab.nn.weights import LISTED, MAX_TENSORS, WeightsError, load_weights, read_state_dict


class Hook:
    """An object of a class of its own, pickled beside weights (as a checkpoint may carry a callback)."""


def _same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))


@pytest.mark.parametrize("layout", ["plain", "release", "ddp", "compiled", "safetensors"])
def test_a_timm_resnet_comes_back_whole_from_each_layout(tmp_path, layout):
    torch.manual_seed(0)
    source = timm.create_model("resnet18", pretrained=False, num_classes=10)
    state = source.state_dict()
    path = tmp_path / ("w.safetensors" if layout == "safetensors" else "w.pt")
    if layout == "safetensors":
        save_file({k: v.contiguous() for k, v in state.items()}, str(path))
    else:
        prefix = {"ddp": "module.", "compiled": "_orig_mod."}.get(layout, "")
        state = {f"{prefix}{k}": v for k, v in state.items()}
        torch.save({"model": state, "epoch": 799} if layout == "release" else state, path)
    target = timm.create_model("resnet18", pretrained=False, num_classes=10)
    assert not _same(source, target)
    report = load_weights(target, path)
    assert report.exact and report.loaded == len(source.state_dict()) and _same(source, target)


def test_a_torchvision_resnet_loads_and_a_file_of_pickled_objects_is_refused(tmp_path):
    source = torchvision.models.resnet18(num_classes=10)
    torch.save(source.state_dict(), tmp_path / "tv.pt")
    target = torchvision.models.resnet18(num_classes=10)
    assert load_weights(target, tmp_path / "tv.pt").exact and _same(source, target)
    torch.save(source, tmp_path / "whole.pt")  # the model object itself: unpickling it would run code
    with pytest.raises(WeightsError, match="pickled objects"):
        read_state_dict(tmp_path / "whole.pt")
    torch.save({"model": source.state_dict(), "hook": Hook()}, tmp_path / "hooked.pt")  # weights beside an object
    with pytest.raises(WeightsError, match="pickled objects"):
        read_state_dict(tmp_path / "hooked.pt")
    (tmp_path / "torn.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{bad")
    with pytest.raises(WeightsError, match="not a readable safetensors"):
        read_state_dict(tmp_path / "torn.safetensors")
    with pytest.raises(FileNotFoundError):
        read_state_dict(tmp_path / "absent.pt")


def test_keys_that_do_not_fit_are_named_and_refused_unless_not_strict(tmp_path):
    torch.save(timm.create_model("resnet34", pretrained=False, num_classes=5).state_dict(), tmp_path / "r34.pt")
    target = timm.create_model("resnet18", pretrained=False, num_classes=10)
    before = {k: v.clone() for k, v in target.state_dict().items()}
    with pytest.raises(WeightsError) as refused:
        load_weights(target, tmp_path / "r34.pt")
    message = str(refused.value)
    assert "unexpected in the file: layer1.2.conv1.weight" in message and "more" in message
    assert "of another shape: fc.weight: (5, 512) ≠ (10, 512)" in message and "strict=False" in message
    assert all(torch.equal(before[k], v) for k, v in target.state_dict().items()), "a refused load changes nothing"
    report = load_weights(target, tmp_path / "r34.pt", strict=False)
    assert not report.exact and len(report.unexpected) > LISTED and report.mismatched == ["fc.weight: (5, 512) ≠ "
                                                                                           "(10, 512)", "fc.bias: "
                                                                                           "(5,) ≠ (10,)"]
    assert torch.equal(target.state_dict()["conv1.weight"], torch.load(tmp_path / "r34.pt")["conv1.weight"])
    assert torch.equal(target.state_dict()["fc.bias"], before["fc.bias"]), "a mismatched key keeps the model's own"
    torch.save({"epoch": 3, "note": "no weights"}, tmp_path / "empty.pt")
    with pytest.raises(WeightsError, match="no state dict of tensors"):
        read_state_dict(tmp_path / "empty.pt")


# A weights file is read once, its SHA-256 taken from the bytes loaded, and nothing is allocated from what it
# declares before that is checked against the file's own size and the module's ceilings.

def _tiny() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Linear(3, 2)


def _rezipped(state: dict, replace: dict[str, tuple[int, bytes]]) -> bytes:
    """``torch.save(state)``'s archive, with the entries ``replace`` names rewritten (compression, content)."""
    saved = io.BytesIO()
    torch.save(state, saved)
    source, out = zipfile.ZipFile(io.BytesIO(saved.getvalue())), io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for info in source.infolist():
            if info.filename not in replace:
                archive.writestr(info.filename, source.read(info))
                continue
            method, chunk = replace[info.filename]
            entry = zipfile.ZipInfo(info.filename)
            entry.compress_type = method
            with archive.open(entry, "w", force_zip64=True) as f:
                for _ in range(200):
                    f.write(chunk)
    return out.getvalue()


def test_normal_files_load_with_the_sha256_of_their_bytes_from_a_path_or_an_open_file(tmp_path):
    source = _tiny()
    torch.save(source.state_dict(), tmp_path / "w.pt")
    save_file({k: v.contiguous() for k, v in source.state_dict().items()}, str(tmp_path / "w.safetensors"))
    for name in ("w.pt", "w.safetensors"):
        raw = (tmp_path / name).read_bytes()
        for given in (tmp_path / name, str(tmp_path / name)):
            report = load_weights(target := torch.nn.Linear(3, 2), given)
            assert report.exact and _same(source, target)
            assert (report.sha256, report.size, report.name) == (hashlib.sha256(raw).hexdigest(), len(raw),
                                                                  str(tmp_path / name))
        with open(tmp_path / name, "rb") as f:
            report = load_weights(target := torch.nn.Linear(3, 2), f)
        assert report.sha256 == hashlib.sha256(raw).hexdigest() and report.name == str(tmp_path / name)
        assert _same(source, target)
        assert load_weights(torch.nn.Linear(3, 2), io.BytesIO(raw)).sha256 == hashlib.sha256(raw).hexdigest()


def test_weights_opened_in_the_data_folders_are_the_ones_loaded_when_a_link_is_swapped_in(tmp_path):
    root, outside = tmp_path / "data", tmp_path / "elsewhere"
    root.mkdir()
    outside.mkdir()
    source = _tiny()
    torch.save(source.state_dict(), root / "w.pt")
    original = hashlib.sha256((root / "w.pt").read_bytes()).hexdigest()
    torch.save(torch.nn.Linear(3, 2).state_dict(), outside / "other.pt")
    f = open_data_file("w.pt", [root])
    (root / "swap").symlink_to(outside / "other.pt")
    os.replace(root / "swap", root / "w.pt")  # right after the check, the name leads outside
    with f:
        report = load_weights(target := torch.nn.Linear(3, 2), f)
    assert report.sha256 == original and _same(source, target)


def test_a_small_pt_declaring_a_huge_compressed_tensor_is_refused_before_torch_reads_it(tmp_path, monkeypatch):
    forged = _rezipped({"w": torch.zeros(4)}, {"archive/data/0": (zipfile.ZIP_DEFLATED, bytes(2**20))})
    assert len(forged) < 2**20, "200 MB of zeros, deflated"
    (tmp_path / "bomb.pt").write_bytes(forged)

    def never(*args, **kwargs):
        raise AssertionError("torch.load was reached: the file's declared sizes were not checked first")

    monkeypatch.setattr(torch, "load", never)
    with pytest.raises(WeightsError, match=r"'archive/data/0' compressed .* declaring 209,715,200\).*uncompressed"):
        read_state_dict(tmp_path / "bomb.pt")


def test_a_pt_whose_entries_declare_more_bytes_than_it_holds_is_refused(tmp_path, monkeypatch):
    saved = io.BytesIO()
    torch.save({"w": torch.zeros(4)}, saved)
    data = bytearray(saved.getvalue())
    entry = data.find(b"archive/data/0", data.find(b"PK\x01\x02")) - 46  # its record in the table of contents
    assert data[entry:entry + 4] == b"PK\x01\x02"
    struct.pack_into("<II", data, entry + 20, 2**30, 2**30)  # stored, 1 GiB declared for a 16-byte tensor
    (tmp_path / "forged.pt").write_bytes(bytes(data))
    monkeypatch.setattr(torch, "load", lambda *a, **k: pytest.fail("torch.load was reached"))
    with pytest.raises(WeightsError, match=r"entries declare 1,073,74\d,\d{3} bytes in all, more than the file's"):
        read_state_dict(tmp_path / "forged.pt")


def test_too_many_tensors_in_a_pt_are_refused(tmp_path, monkeypatch):
    torch.save({f"t{i}": torch.zeros(1) for i in range(5)}, tmp_path / "many.pt")
    monkeypatch.setattr(weights, "MAX_TENSORS", 4)
    with pytest.raises(WeightsError, match="declares 5 tensors; the lab loads at most 4"):
        read_state_dict(tmp_path / "many.pt")


def test_a_legacy_pt_is_refused_with_how_to_resave_it(tmp_path):
    torch.save(_tiny().state_dict(), tmp_path / "old.pt", _use_new_zipfile_serialization=False)
    with pytest.raises(WeightsError, match=r"not the zip archive torch.save .* Re-save it with a current torch"):
        read_state_dict(tmp_path / "old.pt")


def _safetensors(table: dict, data: bytes = b"") -> bytes:
    header = json.dumps(table, separators=(",", ":")).encode()
    return len(header).to_bytes(8, "little") + header + data


def test_a_safetensors_file_declaring_100_000_empty_tensors_is_refused_before_its_header_is_parsed(tmp_path,
                                                                                                     monkeypatch):
    empty = {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]}
    (tmp_path / "many.safetensors").write_bytes(_safetensors({str(i): empty for i in range(100_000)}))
    assert (tmp_path / "many.safetensors").stat().st_size < 6 * 2**20
    monkeypatch.setattr(weights.json, "loads", lambda *a: pytest.fail("the header was parsed"))
    with pytest.raises(WeightsError, match=f"declares 100,000 tensors .*at most {MAX_TENSORS:,}"):
        read_state_dict(tmp_path / "many.safetensors")


@pytest.mark.parametrize(("content", "words"), [
    (b"\xe8\x03" + bytes(6) + b'{"w":{}}', "declares a header of 1,000 bytes but holds only 8"),
    (_safetensors({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, bytes(8)),
     r"tensor 'w' declares its bytes at \[0, 16\], outside the 8 bytes"),
    (_safetensors({"w": {"dtype": "F32", "shape": [10**6], "data_offsets": [0, 8]}}, bytes(8)),
     r"shape \(1000000,\) of F32 \(4,000,000 bytes\) but 8 bytes stored"),
    (_safetensors({"w": {"dtype": "X9", "shape": [2], "data_offsets": [0, 8]}}, bytes(8)), "dtype 'X9'"),
    ((2**40).to_bytes(8, "little") + b"{}", "declares a header of 1,099,511,627,776 bytes"),
])
def test_a_safetensors_header_that_declares_more_than_the_file_holds_is_refused(tmp_path, content, words):
    (tmp_path / "forged.safetensors").write_bytes(content)
    with pytest.raises(WeightsError, match=f"not a readable safetensors file: .*{words}"):
        read_state_dict(tmp_path / "forged.safetensors")
    with pytest.raises(WeightsError, match=words):
        read_state_dict(io.BytesIO(content))  # no name: told apart by its content


def test_a_recorded_file_is_read_again_only_while_its_bytes_are_those_recorded(tmp_path):
    path = tmp_path / "w.pt"
    torch.save(torch.nn.Linear(3, 2).state_dict(), path)
    first = weights.read_weights(path)
    again = weights.read_recorded(path, first.sha256, first.size)
    assert again.sha256 == first.sha256 and all(torch.equal(again.state[k], v) for k, v in first.state.items())
    raw = path.read_bytes()
    path.write_bytes(raw[:-1] + bytes([raw[-1] ^ 1]))  # the same size, one bit else
    with pytest.raises(WeightsError, match=r"w.pt has changed since the network was imported.*import it again"):
        weights.read_recorded(path, first.sha256, first.size)
    path.write_bytes(raw + b"more")  # another size: refused before a byte is read
    with pytest.raises(WeightsError, match=f"it is {first.size + 4:,} bytes long, {first.size:,} when imported"):
        weights.read_recorded(path, first.sha256, first.size)
    path.unlink()
    with pytest.raises(FileNotFoundError, match="no weights file .*w.pt any more"):
        weights.read_recorded(path, first.sha256, first.size)


def test_a_lenient_load_names_the_tensors_left_at_initialisation(tmp_path):
    target = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 4))
    torch.save({"0.weight": torch.ones(2, 3), "1.weight": torch.ones(5, 2)}, tmp_path / "w.pt")
    report = load_weights(target, tmp_path / "w.pt", strict=False)
    assert report.initialised == ["0.bias", "1.bias", "1.weight"] and report.loaded == 1
    assert torch.equal(target[0].weight, torch.ones(2, 3))

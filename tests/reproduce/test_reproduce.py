"""``python -m lab reproduce``: every claim reported with the numbers its verdict rests on, the scale it ran at,
commands and time; a self-contained report that shows data as text; an experiment that fails is an error (its own
claims only), and the command says so."""

import json
import re

import pytest

from lab.cli import main
from lab.extras import MissingExtra
from lab.reproduce import ra_transformers, reproduce
from lab.reproduce.alignment import claims_of
from lab.reproduce.claims import PAPERS, Claim, Curves, Result, mean_sd
from lab.reproduce.decayed import CLAIMS as DECAYED
from lab.reproduce.droppath import CLAIMS as DROPPATH
from lab.reproduce.report import html_page, markdown
from lab.reproduce.runs import train, train_seeds
from lab.reproduce.toy_mae import CLAIMS as TOY_MAE
from lab.reproduce.verdict import judge
from lab.runs.store import RunStore
from tests.test_extras import hide

EVERY_CLAIM = [c.id for c in (*claims_of("fc"), *claims_of("conv"), *ra_transformers.all_claims(), DECAYED["rank"],
                              *TOY_MAE.values(),
                              *(DECAYED[k] for k in ("mae", "diffusion_fid", "diffusion_probe")), *DROPPATH.values())]
NUMBERS = ("effect", "ci95", "p_value", "seeds", "floor", "scale")


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("reproduce") / "out"
    assert main(["reproduce", "--budget", "smoke", "--out", str(out), "--no-progress"]) == 0
    return out


def test_smoke_checks_every_pipeline_and_judges_no_claim(smoke):
    record = json.loads((smoke / "claims.json").read_text())
    assert record["budget"] == "smoke" and record["seeds"] == 1 and "judges none" in record["scope"]
    claims = {c["id"]: c for c in record["claims"]}
    assert list(claims) == EVERY_CLAIM and len(EVERY_CLAIM) == 25
    for claim in claims.values():
        assert claim["verdict"] == "pipeline only", claim  # a smoke run shows no claim either way
        assert all(key in claim for key in NUMBERS) and claim["seeds"] <= 1 and claim["p_value"] is None
        assert claim["scale"]["lab"] and claim["scale"]["paper"], claim["id"]
        assert claim["commands"] and claim["commands"][0].startswith("python -m lab ")
        assert claim["seconds"] > 0 and claim["paper"] in PAPERS.values() and claim["lab_value"] != "—"
    assert all(len(v) == 1 for c in claims.values() for v in c["values"].values())  # one seed
    # every training is an ordinary run folder the Runs page can open
    folders = list((smoke / "runs").iterdir())
    runs = [p for p in folders if (p / "status.json").exists()]
    # ensembles of seeds: the rank sweep, the toy MAE's (its arms, and one more bottleneck width), Figure 3's
    sweeps = [p for p in folders if (p / "sweep.json").exists()]
    assert (len(runs), len(sweeps)) == (11, 4)
    assert all(json.loads((p / "status.json").read_text())["state"] == "completed" for p in runs)
    md = (smoke / "report.md").read_text()
    parts = sum(len(c["parts"]) for c in claims.values())  # a combined claim's parts, each on a row of its own
    assert parts >= 2 * 6 and all(p["what"] and p["verdict"] for c in claims.values() for p in c["parts"])
    assert "judges none" in md and md.count("\n| ") == 1 + 25 + parts  # header, one row per claim and per part
    assert ("| 95% CI | p (Holm) | p against (Holm) | target | seeds | power (seeds for 0.8) | floor "
            "| scale (lab / paper) |") in md
    page = (smoke / "report.html").read_text()
    assert not re.search(r"<(script|link)[^>]+(src|href)=['\"]?https?:", page)  # nothing fetched: opens offline
    assert page.count("class='pipeline-only'") == 25 + parts and "judges none" in page


def test_a_failed_experiment_is_an_error_not_a_verdict_and_the_others_go_on(tmp_path, monkeypatch, capsys):
    from lab.reproduce import droppath

    def broken(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(droppath, "measure_figure3", broken)
    results, _ = reproduce(tmp_path / "r", papers=["droppath"], budget="smoke", progress=False)
    by_id = {r.claim.id: r for r in results}
    assert by_id["droppath.figure3"].verdict == "error" and by_id["droppath.figure3"].judged is None
    assert "RuntimeError: disk full" in by_id["droppath.figure3"].reason
    assert by_id["droppath.table1"].verdict == "pipeline only"
    # the command names the failure and exits non-zero, the report written all the same
    assert main(["reproduce", "--paper", "droppath", "--budget", "smoke", "--out", str(tmp_path / "c"),
                 "--no-progress"]) == 1
    assert "error: droppath.figure3: the experiment failed: RuntimeError: disk full" in capsys.readouterr().err
    assert json.loads((tmp_path / "c" / "claims.json").read_text())["claims"][0]["verdict"] == "error"


def test_a_claim_that_needs_an_extra_names_it_and_the_others_are_measured(tmp_path, monkeypatch, capsys):
    """Without the diffusion extra the tiny U-ViT still trains and is probed; digits-FD (torchmetrics') is not
    measurable, its row naming the extra and its pip line. An experiment that stops on a missing extra reports its
    claims so, never as an error: the command exits 0 and prints no traceback."""
    from lab.extras import require
    from lab.reproduce import _measure, droppath, experiment_seeds

    hide(monkeypatch, "torchmetrics", "torch_fidelity", "diffusers")
    pip = 'needs the [diffusion] extra: pip install "residual-lab[diffusion]" (or "residual-lab[all]")'
    fid, probe = _measure("decayed.diffusion", "smoke", experiment_seeds("smoke"), tmp_path / "runs", tmp_path,
                          lambda: None)
    assert (fid.claim.id, fid.verdict, fid.reason, fid.lab_value) == ("decayed.diffusion_fid", "not measurable", pip,
                                                                       pip)
    assert any(c.startswith("python -m lab fid ") for c in fid.commands)  # what to run once it is installed
    assert probe.claim.id == "decayed.diffusion_probe" and probe.verdict == "pipeline only"
    assert probe.values["deepest blocks, α_min 0.7"] and not any(" fid " in c for c in probe.commands)
    assert "| decayed.diffusion_fid |" in markdown([fid, probe], {"budget": "smoke", "seeds": 1, "seconds": 1.0})
    assert f"| {pip} | not measurable |" in markdown([fid], {"budget": "smoke", "seeds": 1, "seconds": 1.0})

    monkeypatch.setattr(droppath, "measure_figure3", lambda *args, **kwargs: require("umap"))
    hide(monkeypatch, "umap")
    assert main(["reproduce", "--paper", "droppath", "--budget", "smoke", "--out", str(tmp_path / "c"),
                 "--no-progress"]) == 0
    out, err = capsys.readouterr()
    embed = 'needs the [embed] extra: pip install "residual-lab[embed]" (or "residual-lab[all]")'
    assert f"droppath.figure3  not measurable  {embed}" in out and "Traceback" not in err and "error:" not in err
    claims = json.loads((tmp_path / "c" / "claims.json").read_text())["claims"]
    assert [(c["id"], c["verdict"], c["reason"]) for c in claims][0] == ("droppath.figure3", "not measurable", embed)
    assert claims[1]["verdict"] == "pipeline only"


def test_a_reproduction_refuses_a_training_that_needs_an_extra_before_its_run_folder(tmp_path, monkeypatch):
    hide(monkeypatch, "torchmetrics")
    store = RunStore(tmp_path / "runs")
    with pytest.raises(MissingExtra, match=r'needs the \[diffusion\] extra: pip install "residual-lab\[diffusion\]"'):
        train("uvit_tiny_digits", ["train.fd_samples=16"], store, "fd")
    with pytest.raises(MissingExtra, match=r"residual-lab\[diffusion\]"):
        train_seeds("uvit_tiny_digits", ["train.fd_samples=16"], {"a": []}, 2, store)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_bad_input_is_refused_before_anything_is_written(smoke, tmp_path, capsys):
    assert main(["reproduce", "--budget", "smoke", "--out", str(smoke)]) == 2  # a finished report is never replaced
    assert "holds a reproduction already" in capsys.readouterr().err
    assert main(["reproduce", "--seeds", "0", "--out", str(tmp_path / "x")]) == 2
    assert not (tmp_path / "x").exists()
    with pytest.raises(SystemExit):
        main(["reproduce", "--paper", "nope"])
    with pytest.raises(ValueError, match="budget"):
        reproduce(tmp_path / "y", budget="tpu")


def test_the_report_shows_every_text_as_text():
    claim = Claim("x.y", "alignment", "<b>Figure 1</b>", "a <script>alert(1)</script> claim", "1 | 2", "m <i>",
                  "<u>paper</u>")
    result = Result(claim, {"a": [1.0, 2.0]}, "<img src=x onerror=alert(2)>", judge([1.0, 2.0], what="because <b>"),
                    "<s>lab</s>", ["echo <x>"], 1.0, Curves("<t>", "x", "y", {"<s>": ([0, 1], [1, 2])}))
    meta = {"budget": "cpu", "seeds": 2, "seconds": 3.0, "scope": "<em>scope</em>"}
    page = html_page([result], meta)
    for raw in ("<script>alert(1)", "<img src=x", "<b>Figure", "<b>because", "<x>", "<i>", "<u>paper", "<s>lab",
                "<em>scope"):
        assert raw not in page
    assert "&lt;img src=x onerror=alert(2)&gt;" in page
    md = markdown([result], meta)
    assert "<script>" not in md and "1 \\| 2" in md


def test_the_report_names_no_file_on_another_server_whatever_bokeh_lists(monkeypatch):
    """Bokeh's resources list the stylesheets of extensions a process has loaded, some on public servers."""
    from bokeh.resources import Resources

    monkeypatch.setattr(Resources, "css_files", property(lambda self: ["https://cdn.example.org/x.css"]))
    monkeypatch.setattr(Resources, "js_files", property(lambda self: ["https://cdn.example.org/x.js"]))
    claim = Claim("x.y", "alignment", "Figure 1", "a claim", "1", "m")
    result = Result(claim, {"a": [1.0]}, "1", judge([1.0], what="x"), "", [], 1.0,
                    Curves("t", "x", "y", {"s": ([0, 1], [1, 2])}))
    page = html_page([result], {"budget": "cpu", "seeds": 1, "seconds": 1.0})
    assert "cdn.example.org" not in page and "Bokeh" in page and "<div" in page


def test_measures_and_summaries():
    assert mean_sd([1.0, 2.0, 3.0]) == "2 ± 1" and mean_sd([0.5]) == "0.5" and mean_sd([]) == "n/a"
    assert mean_sd([1.0, float("nan"), 3.0]) == "2 ± 1.41"


def test_every_row_gives_its_power_and_an_underpowered_row_says_so():
    """A row's power cell gives the power at its planned effect and the seeds for 0.8; an inconclusive claim the budget
    could not have decided reads "underpowered at this budget" with both, never a bare "inconclusive"; one it could
    have decided reads plainly; the header names the experiments' own seed counts."""
    from lab.reproduce.verdict import Target

    claim = Claim("x.y", "alignment", "Figure 1", "a claim", "1", "m")
    weak = judge([0.01, 0.03, -0.01, 0.02], what="gain", target=Target(0.02, "the paper's +2 points"))
    sure = judge([0.05, -0.02, 0.01, 0.04, -0.03, 0.02], what="gain", target=Target(5.0, "a note", same_metric=False))
    held = judge([1.0, 1.1, 0.9], what="gain")
    rows = [Result(claim, {}, "", v) for v in (weak, sure, held)]
    meta = {"budget": "cpu", "seeds": {"alignment.fc": 10, "droppath.table1": 5}, "seconds": 3.0, "scope": ""}
    md = markdown(rows, meta)
    assert f"inconclusive: underpowered at this budget (power {weak.power:.2f}, needs {weak.needed} seeds)" in md
    assert f"| {weak.power:.2f} ({weak.needed}) |" in md and weak.power < 0.8 and weak.needed > 4
    assert f"| inconclusive | {sure.stats.effect:.3g} |" in md and f"| {sure.power:.2f} ({sure.needed}) |" in md
    assert "| holds |" in md and "seeds: alignment.fc 10, droppath.table1 5" in md.splitlines()[0]
    page = html_page(rows, meta)
    assert page.count("<td class='inconclusive'>") == 2 and "seeds: alignment.fc 10" in page


def test_experiments_measured_in_processes_of_their_own_report_as_one(tmp_path):
    """``--workers 2`` from the command line (as a user runs it, ``python -m lab``): each experiment in a spawned
    process, the report in the experiments' order with every run folder in it, and the progress bar ticked from
    the processes; a bad count is refused before anything is made."""
    import subprocess
    import sys

    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "lab", "reproduce", "--budget", "smoke", "--paper", "droppath",
                           "--workers", "2", "--out", str(out)], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads((out / "claims.json").read_text())
    assert [c["id"] for c in record["claims"]] == ["droppath.figure3", "droppath.table1"]
    assert all(c["verdict"] == "pipeline only" for c in record["claims"])
    folders = list((out / "runs").iterdir())
    assert sum((p / "sweep.json").exists() for p in folders) == 1 and sum((p / "status.json").exists()
                                                                           for p in folders) == 3
    assert "5/5" in done.stderr  # Figure 3's two trainings and Table 1's three, ticked from the processes
    refused = subprocess.run([sys.executable, "-m", "lab", "reproduce", "--budget", "smoke", "--workers", "0",
                              "--out", str(tmp_path / "no")], capture_output=True, text=True, timeout=600)
    assert refused.returncode == 2 and "--workers must be at least 1" in refused.stderr
    assert not (tmp_path / "no").exists()

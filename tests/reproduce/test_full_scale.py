"""The full-scale reproduction: its plan and estimates, the decision per run, and the whole pipeline shrunk to
seconds — plan, launch with torchrun (gloo), interrupt mid-run, continue, collect."""

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from lab.cli import main
from lab.config import ConfigError
from lab.reproduce.estimate import gpu_hours, read_throughput, record_throughput
from lab.reproduce.full_scale import Step
from lab.reproduce.launch import load_ledger, next_action
from lab.reproduce.plan import make_plan, parse_data
from lab.runfolder import layout
from lab.runs.store import RunStore
from tests.reproduce import tiny_data
from tests.waiting import deadline, scaled


def test_the_dry_run_prints_every_run_with_its_data_and_gpu_hours(tmp_path, capsys):
    for split in ("in100/train/a", "in100/val/a", "c100/train/a", "c100/val/a"):  # class folders, as each needs
        (tmp_path / split).mkdir(parents=True)
    rates = tmp_path / "throughput.jsonl"
    record_throughput(rates, "mae_vit_base_patch16@224", 1000.0, device="Test GPU")
    record_throughput(rates, "uvit_small@32", 5.0, device="another GPU")  # another device: not used
    code = main(["reproduce", "--budget", "gpu", "--dry-run", "--data", f"imagenet100={tmp_path / 'in100'}",
                 "--data", f"cifar100={tmp_path / 'c100'}", "--throughput", str(rates), "--device-kind", "Test GPU",
                 "--runs-dir", str(tmp_path / "runs")])
    text = capsys.readouterr().out
    assert code == 0 and not (tmp_path / "runs").exists()  # nothing runs, nothing is written
    mae = [line for line in text.splitlines() if line.startswith("mae-")]
    assert len(mae) == 3 * 9  # three seeds of six α_min, two controls and the network without U-Net skips
    hours = 800 * 126_689 / 1000 / 3600
    assert all(f"GPU-hours {hours:,.1f}" in line and "imagenet100" in line for line in mae)
    uvit = [line for line in text.splitlines() if line.startswith("uvit-")]
    # Table 4's α_min 1.0, 0.8, 0.7, 0.6, every arm zero-initialised, and the plain U-ViT beside them
    assert len(uvit) == 3 * 5 and all("GPU-hours unknown" in line for line in uvit)
    assert {line.split()[0] for line in uvit} >= {"uvit-a1-s0", "uvit-a0.8-s0", "uvit-a0.6-s2", "uvit-plain-s1"}
    assert f"{42} runs; {27 * hours:,.1f} GPU-hours estimated, 15 run(s) unknown" in text
    assert "torchrun --nproc_per_node=4 -m lab train mae_vit_b16_in100" in text
    assert "python -m lab probe RUN --protocol authors" in text
    assert "decayed.diffusion_fid: needs --data inception=DIR" in text  # FID needs the Inception weights
    assert "droppath.table1: needs --data mnist=DIR" in text and "or --data cifar10=DIR" in text


def test_without_data_the_plan_names_what_each_claim_needs(capsys, tmp_path):
    assert main(["reproduce", "--budget", "gpu1", "--dry-run", "--runs-dir", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "0 runs" in text
    assert "alignment.ra2.fc: needs --data mnist=DIR" in text
    assert "decayed.mae_probe: MAE ViT-B/16 on ImageNet-100" in text and "gpu budget" in text
    assert "decayed.rank: " in text and "cpu budget" in text
    assert main(["reproduce", "--collect", str(tmp_path)]) == 2  # a folder without a plan: said, nothing written
    assert "holds no reproduce.json" in capsys.readouterr().err and not (tmp_path / "report.md").exists()


def test_data_arguments_are_checked_before_anything_runs(tmp_path):
    with pytest.raises(ConfigError, match="unknown data 'svhn'.*imagenet100"):
        parse_data([f"svhn={tmp_path}"])
    with pytest.raises(ConfigError, match="no such folder"):
        parse_data([f"cifar10={tmp_path / 'missing'}"])
    with pytest.raises(ConfigError, match="NAME=DIR"):
        parse_data(["cifar10"])
    with pytest.raises(ConfigError, match="twice"):
        parse_data([f"inception={__file__}", f"INCEPTION={__file__}"])
    # each data set's files are looked for as its reader looks for them, before anything is planned
    with pytest.raises(ConfigError, match="must be the folder holding the four MNIST idx files: MNIST files not"):
        parse_data([f"mnist={tmp_path}"])
    with pytest.raises(ConfigError, match="CIFAR-10 batches"):
        parse_data([f"cifar10={tmp_path}"])
    (tmp_path / "in100" / "train" / "a").mkdir(parents=True)
    with pytest.raises(ConfigError, match="no class folders in .*in100/val"):
        parse_data([f"imagenet100={tmp_path / 'in100'}"])
    with pytest.raises(ConfigError, match="not a file"):
        parse_data([f"inception={tmp_path}"])
    mnist = tiny_data.mnist(tmp_path / "mnist")
    assert parse_data([f"MNIST={mnist}"]) == {"mnist": mnist.resolve()}
    assert parse_data([f"cifar10={tiny_data.cifar10(tmp_path / 'cifar')}"])["cifar10"] == tmp_path / "cifar"
    with pytest.raises(ValueError, match="budget"):
        make_plan("cpu", ["droppath"], None, {})


def test_a_report_folder_of_another_reproduction_is_not_continued(tmp_path, capsys):
    from lab.reproduce.launch import PlanMismatch, ledger_for

    plan = make_plan("gpu-test", ["droppath"], None, {})
    (tmp_path / "toy").mkdir()
    (tmp_path / "toy" / "claims.json").write_text("{}")
    with pytest.raises(PlanMismatch, match="toy reproduction"):
        ledger_for(plan, tmp_path / "toy", "local")
    (tmp_path / "gpu" / "reproduce.json").parent.mkdir()
    (tmp_path / "gpu" / "reproduce.json").write_text(json.dumps({"budget": "gpu", "papers": ["droppath"], "seeds": 3,
                                                                 "data": {}, "runs": {}}))
    assert main(["reproduce", "--budget", "gpu-test", "--paper", "droppath", "--out", str(tmp_path / "gpu")]) == 2
    assert "at the gpu budget, not gpu-test" in capsys.readouterr().err


def test_estimates_use_the_latest_record_of_the_device(tmp_path):
    path = tmp_path / "t.jsonl"
    record_throughput(path, "m@32", 100.0, device="A")
    record_throughput(path, "m@32", 200.0, device="A")
    assert read_throughput(path, "A") == {"m@32": 200.0} and read_throughput(path, "B") == {}
    assert gpu_hours(720_000, "m@32", {"m@32": 200.0}) == pytest.approx(1.0)
    assert gpu_hours(720_000, None, {"m@32": 200.0}) != gpu_hours(720_000, None, {"m@32": 200.0})  # NaN: unknown
    path.write_text(path.read_text() + "not json\n")
    with pytest.raises(ValueError, match="line 3"):
        read_throughput(path, "A")


def test_each_run_continues_from_what_its_folder_holds(tmp_path):
    store = RunStore(tmp_path)
    step = Step(("probe", "{run}"), layout.PROBE)
    assert next_action(None, [step], {}) == "train"
    run = store.create("r")
    assert next_action(run, [step], {}) == "train"  # made, never started
    run.write_config({"model": {}})
    run.write_status("running", "step 3")
    (run.path / layout.LOCK).write_text(json.dumps({"host": os.uname().nodename, "pid": os.getpid()}))
    assert next_action(run, [step], {}) == "busy"  # a live process trains it
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (run.path / layout.LOCK).write_text(json.dumps({"host": os.uname().nodename, "pid": int(dead.stdout)}))
    assert next_action(run, [step], {}) == "restart"  # killed before any checkpoint: from step 0
    run.checkpoint_path("last").parent.mkdir(parents=True, exist_ok=True)
    torch.save({"step": 3}, run.checkpoint_path("last"))
    assert next_action(run, [step], {}) == "resume"
    run.write_status("completed", "done")
    assert next_action(run, [step], {}) == "steps"
    run.analysis_path(layout.PROBE).parent.mkdir(parents=True, exist_ok=True)
    run.analysis_path(layout.PROBE).write_text("{}")
    assert next_action(run, [step], {}) == "done"
    assert next_action(run, [step], {"state": "step failed"}) == "failed"
    assert next_action(run, [step], {"state": "step failed"}, retry_failed=True) == "done"
    run.write_status("diverged", "NaN")
    assert next_action(run, [step], {}) == "failed"
    assert next_action(run, [step], {}, retry_failed=True) == "restart"


def _ledger_states(out: Path) -> dict[str, str]:
    return {k: r["state"] for k, r in load_ledger(out)["runs"].items()}


def _wait_training(out: Path, key: str, proc: subprocess.Popen, timeout: float = 300) -> None:
    """Until the run ``key`` trains (its status says running, past its first step); fails at once, with its output,
    when the pipeline ``proc`` has ended. On CPU the plan's runs train one at a time, ``key``'s after the U-ViTs:
    the deadline scales with the machine's load (:func:`tests.waiting.deadline`)."""
    end = deadline(timeout)
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise AssertionError(f"the pipeline ended ({proc.returncode}) before {key} trained:\n{proc.stdout.read()}")
        record = load_ledger(out).get("runs", {}).get(key, {}) if (out / "reproduce.json").exists() else {}
        status = out / record["folder"] / layout.STATUS if record.get("folder") else None
        if status is not None and status.exists():
            s = json.loads(status.read_text() or "{}")
            if s.get("state") == "running" and (s.get("step") or 0) >= 1:
                return
        time.sleep(0.1)
    raise AssertionError(f"{key} did not start training within {timeout} s")


def test_the_shrunken_pipeline_plans_launches_survives_an_interruption_continues_and_collects(tmp_path):
    mnist = tiny_data.mnist(tmp_path / "mnist", train=512, test=64)  # 32 steps a run: long enough to interrupt
    cifar100 = tiny_data.image_folder(tmp_path / "cifar100")
    out = tmp_path / "repro"
    command = [sys.executable, "-m", "lab", "reproduce", "--budget", "gpu-test", "--data", f"mnist={mnist}",
               "--data", f"cifar100={cifar100}", "--paper", "droppath", "--paper", "decayed", "--out", str(out),
               "--no-progress"]  # the alignment runs go through the cluster executor's test below
    first = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait_training(out, "table1-mnist-off-s0", first)
        first.send_signal(signal.SIGTERM)  # Ctrl-C, or the allocation ending: every run stops with a checkpoint
        output, _ = first.communicate(timeout=scaled(180))
    finally:
        first.kill()
    assert first.returncode == 130, output
    assert "the same command run again continues" in output
    states = _ledger_states(out)
    assert states["table1-mnist-off-s0"] == "stopped"
    assert [states[k] for k in ("uvit-a0.7-s0", "uvit-a1-s0")] == ["completed"] * 2  # the plan's order: trained before
    assert states["table1-mnist-droppath-s0"] == "planned"
    ledger = load_ledger(out)
    stopped = out / ledger["runs"]["table1-mnist-off-s0"]["folder"]
    stopped_at = json.loads((stopped / layout.STATUS).read_text())["step"]
    assert json.loads((stopped / layout.STATUS).read_text())["state"] == "stopped" and 1 <= stopped_at < 32
    before = {k: (out / r["folder"] / layout.METRICS).read_bytes() for k, r in ledger["runs"].items()
              if r["state"] == "completed"}

    assert main(["reproduce", "--collect", str(out)]) == 0  # what has finished, judged; the rest says how far
    claims = {c["id"]: c for c in json.loads((out / "claims.json").read_text())["claims"]}
    assert claims["droppath.table1"]["verdict"] == "pending"
    assert f"table1-mnist-off-s0: stopped at step {stopped_at} of 32" in claims["droppath.table1"]["reason"]
    assert claims["decayed.diffusion_probe"]["verdict"] == "pipeline only"

    again = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=scaled(600))
    assert again.returncode == 0, again.stdout + again.stderr
    ledger = load_ledger(out)
    assert all(r["state"] == "completed" for r in ledger["runs"].values())
    for key, metrics in before.items():  # finished runs reused, not trained again
        assert (out / ledger["runs"][key]["folder"] / layout.METRICS).read_bytes() == metrics
        assert ledger["runs"][key]["attempts"] == 1
    assert ledger["runs"]["table1-mnist-off-s0"]["attempts"] == 2
    log = (out / "logs" / "table1-mnist-off-s0.log").read_text()
    assert "-m lab resume" in log and "--run-dir" in log  # trained, then resumed from its checkpoint
    records = [json.loads(line) for line in (stopped / layout.METRICS).read_text().splitlines()]
    steps = [r["step"] for r in records if r.get("kind") == "step"]
    assert steps == sorted(steps) and steps[-1] == 32 and len(set(steps)) == len(steps)  # continued, not redone

    claims = {c["id"]: c for c in json.loads((out / "claims.json").read_text())["claims"]}
    assert {claims[k]["verdict"] for k in ("droppath.table1", "decayed.diffusion_probe")} == {"pipeline only"}
    assert claims["decayed.diffusion_fid"]["verdict"] == "not measurable"
    assert "inception" in claims["decayed.diffusion_fid"]["reason"]
    assert "imagenet100" in claims["decayed.mae_probe"]["reason"]
    assert "alignment.ra2.fc" not in claims  # a paper not asked for
    assert claims["droppath.table1"]["values"]["mnist Ours"][0] is not None
    report = (out / "report.md").read_text()
    assert "GPU-test budget" in report and "| droppath.table1 |" in report
    assert "table1-mnist-off-s0" in again.stderr or "completed" in again.stderr


def test_the_cluster_executor_sends_one_job_per_run_which_trains_and_steps_and_is_not_sent_twice(tmp_path,
                                                                                                  monkeypatch):
    from submitit.local.local import LocalJob

    from lab.jobs.submit import Resources
    from lab.reproduce import plan as plan_module
    from lab.reproduce import reproduce_at_scale
    from lab.reproduce.collect import collect

    mnist = tiny_data.mnist(tmp_path / "mnist")
    out = tmp_path / "repro"
    local = Resources(executor="local", time="0:10:00")  # submitit's local executor: the same jobs, on this machine
    ledger = reproduce_at_scale(out, papers=["alignment"], budget="gpu-test", data={"mnist": mnist},
                                executor="slurm", resources=local, progress=False)
    assert {k: r["state"] for k, r in ledger["runs"].items()} == {"ra-fc-identity-s0": "submitted",
                                                                  "ra-fc-none-s0": "submitted",
                                                                  "nc-type4a-s0": "submitted"}  # Figure 7's run
    end = deadline(240)
    folders = [out / r["folder"] for r in ledger["runs"].values()]
    while not all((f / layout.ANALYSIS / layout.ALIGNMENT).exists() for f in folders):  # trained, then analysed
        assert time.monotonic() < end, [(f / layout.STATUS).read_text() for f in folders]
        time.sleep(0.5)
    # each job's result is written by submitit once its steps are done: collected after that, nothing is pending
    results = [LocalJob(out / layout.JOBS, r["job_id"]).paths.result_pickle for r in ledger["runs"].values()]
    while not all(p.exists() for p in results):
        assert time.monotonic() < end, [p for p in results if not p.exists()]
        time.sleep(0.5)
    early, _ = collect(out)  # collected without relaunching: each finished run read from its folder, none pending
    assert {r.verdict for r in early if r.claim.id.endswith(".fc")} == {"pipeline only"}
    assert load_ledger(out)["runs"]["ra-fc-none-s0"]["state"] == "submitted"  # what the launcher last saw

    def grown(experiment):  # today's code plans a run more than the launcher did (another seed, a new arm)
        def plan(budget, seeds, data):
            runs, missing = experiment.plan(budget, seeds, data)
            return [*runs, *(dataclasses.replace(r, key=f"{r.key}-new") for r in runs[:1])], missing
        return dataclasses.replace(experiment, plan=plan)

    monkeypatch.setattr(plan_module, "EXPERIMENTS", tuple(grown(e) for e in plan_module.EXPERIMENTS))
    replanned, _ = collect(out)  # the plan is the ledger's: no run it never launched reads "not started"
    assert [r.verdict for r in replanned] == [r.verdict for r in early]
    monkeypatch.undo()
    again = reproduce_at_scale(out, papers=["alignment"], budget="gpu-test", data={"mnist": mnist},
                               executor="slurm", resources=local, progress=False)
    assert all(r["state"] == "completed" and r["attempts"] == 1 for r in again["runs"].values())
    assert (out / ledger["runs"]["nc-type4a-s0"]["folder"] / layout.ANALYSIS / layout.COLLAPSE).exists()
    results, _ = collect(out)
    assert {r.verdict for r in results if r.claim.id.endswith(".fc")} == {"pipeline only"}


def test_a_ledger_whose_plan_is_not_a_launchers_is_refused_by_name():
    from lab.reproduce.plan import from_ledger

    ledger = {"budget": "gpu-test", "papers": ["alignment"], "seeds": 1, "data": {}, "runs": {}}
    for experiments, words in (([{"claims": ["alignment.ra9"], "runs": [], "missing": {}}], "does not measure"),
                               ([{"claims": ["alignment.ra2.fc"], "runs": ["ra-x"], "missing": {}}], "'ra-x'"),
                               (["junk"], "not what a launcher records")):
        with pytest.raises(ValueError, match=words):
            from_ledger({**ledger, "experiments": experiments})
    with pytest.raises(ValueError, match="run 'ra-x'"):
        from_ledger({**ledger, "runs": {"ra-x": {"config": "ra_fc"}}})


def test_a_plan_file_cannot_point_the_launcher_outside_its_runs(tmp_path):
    from lab.reproduce.launch import folder_of

    assert folder_of(tmp_path, {"folder": "runs/x"}).path == (tmp_path / "runs" / "x").resolve()
    assert folder_of(tmp_path, {"folder": None}) is None
    for hostile in ("../elsewhere", "runs/../../elsewhere", "/etc"):
        with pytest.raises(ValueError, match="outside"):
            folder_of(tmp_path, {"folder": hostile})


def test_the_mae_experiments_four_claims_are_collected_from_its_runs(tmp_path):
    """Tables 2, 3a and 3b and Figure 6c from six shrunken MAE runs (three α_min, two controls, no U-Net), each
    probed with the authors' protocol after training; Figure 6c from the rank and quick-probe records of the runs."""
    from lab.reproduce import reproduce_at_scale
    from lab.reproduce.collect import collect

    images = tiny_data.image_folder(tmp_path / "in100")
    ledger = reproduce_at_scale(tmp_path / "repro", papers=["decayed"], budget="gpu-test",
                                data={"imagenet100": images}, progress=False)
    assert sorted(ledger["runs"]) == sorted(f"mae-{a}-s0" for a in ("a1", "a0.8", "a0.6", "scaled_both",
                                                                    "scaled_branch", "a0.6-nounet"))
    assert all(r["state"] == "completed" for r in ledger["runs"].values())
    results = {r.claim.id: r for r in collect(tmp_path / "repro")[0]}
    for cid in ("decayed.mae_probe", "decayed.unet", "decayed.controls", "decayed.rank_probe"):
        assert results[cid].verdict == "pipeline only", (cid, results[cid].reason)
    probes = results["decayed.mae_probe"].values
    assert all(0.0 <= v[0] <= 1.0 for k, v in probes.items() if k.startswith("α_min"))  # each run's probe.json
    assert -1.0 <= -results["decayed.rank_probe"].values["−r at the last epoch"][0] <= 1.0
    assert results["decayed.diffusion_probe"].verdict == "not measurable"  # no cifar100 given


def test_a_billion_seeds_are_refused_from_the_command_line_and_from_a_plan_file(tmp_path, capsys):
    """The attack: ``--seeds 1000000000`` (or the same in a ``reproduce.json`` someone else wrote) took memory until
    the machine ran out, planning the runs; both are refused at once with the bound."""
    from lab.reproduce import reproduce
    from lab.reproduce.claims import MAX_SEEDS
    from lab.reproduce.collect import collect

    for budget in ("cpu", "gpu"):
        assert main(["reproduce", "--budget", budget, "--seeds", str(10**9), "--out", str(tmp_path / "r")]) == 2
        assert f"--seeds must be between 1 and {MAX_SEEDS}" in capsys.readouterr().err
    with pytest.raises(ValueError, match="seeds between 1 and"):
        reproduce(tmp_path / "r", seeds=MAX_SEEDS + 1)
    out = tmp_path / "planted"
    out.mkdir()
    (out / "reproduce.json").write_text(json.dumps({"budget": "gpu", "papers": ["droppath"], "seeds": 10**9,
                                                    "data": {}, "runs": {}}))
    with pytest.raises(ValueError, match=rf"seeds must be an integer in \[1, {MAX_SEEDS}\]"):
        collect(out)
    assert main(["reproduce", "--collect", str(out)]) == 2 and f"seeds must be an integer in [1, {MAX_SEEDS}]" in \
        capsys.readouterr().err
    assert not (tmp_path / "r").exists() and not (out / "report.md").exists()


def test_a_hostile_reproduction_folder_is_never_written_through(tmp_path, capsys):
    """The attacks on a relaunch of a reproduction folder someone else prepared: ``runs/`` a link to another folder
    (the confinement check resolved it first, then wrote there), a run's log a link to any file (the training's
    output was appended to it), a plan naming a run folder through a link, and a world-writable ``jobs/`` whose
    pickles a cluster job would run. Each is refused with its reason, before anything is written through it."""
    from lab.reproduce import reproduce_at_scale
    from lab.reproduce.launch import folder_of
    from lab.runfolder.entries import EntryError

    mnist = tiny_data.mnist(tmp_path / "mnist")
    elsewhere, victim = tmp_path / "elsewhere", tmp_path / "victim.txt"
    elsewhere.mkdir()
    victim.write_text("precious")
    linked_runs = tmp_path / "a"
    linked_runs.mkdir()
    (linked_runs / "runs").symlink_to(elsewhere)
    with pytest.raises(EntryError, match="is a link or not a folder"):
        reproduce_at_scale(linked_runs, papers=["droppath"], budget="gpu-test", data={"mnist": mnist}, progress=False)
    assert not list(elsewhere.iterdir())
    linked_log = tmp_path / "b"
    (linked_log / "logs").mkdir(parents=True)
    (linked_log / "logs" / "table1-mnist-off-s0.log").symlink_to(victim)
    code = main(["reproduce", "--budget", "gpu-test", "--paper", "droppath", "--data", f"mnist={mnist}", "--out",
                 str(linked_log), "--no-progress"])
    assert code == 2 and "is a link or a named pipe" in capsys.readouterr().err
    assert victim.read_text() == "precious"
    with pytest.raises(ValueError, match="outside .*or a link"):
        folder_of(linked_runs, {"folder": "runs"})  # runs/ itself, and a link at that
    (linked_log / "runs").mkdir(exist_ok=True)
    (linked_log / "runs" / "r1").symlink_to(elsewhere)
    with pytest.raises(ValueError, match="or a link"):
        folder_of(linked_log, {"folder": "runs/r1"})
    open_jobs = tmp_path / "c"
    (open_jobs / "jobs").mkdir(parents=True)
    (open_jobs / "jobs").chmod(0o777)
    from lab.jobs.submit import Resources

    with pytest.raises(EntryError, match="not yours alone"):
        reproduce_at_scale(open_jobs, papers=["droppath"], budget="gpu-test", data={"mnist": mnist},
                           executor="slurm", resources=Resources(executor="local"), progress=False)


def test_two_launchers_on_one_folder_do_not_race(tmp_path, capsys):
    """While one launcher works on a reproduction folder (it holds the folder's lock, naming its process), a second
    is refused before it writes anything: the two would train the same runs and race on ``reproduce.json``."""
    mnist = tiny_data.mnist(tmp_path / "mnist")
    out = tmp_path / "repro"
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from pathlib import Path; "
                               "from lab.runfolder.lock import RunLock; RunLock(Path(sys.argv[1])).acquire(); "
                               "print('held', flush=True); time.sleep(120)", str(out)], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        code = main(["reproduce", "--budget", "gpu-test", "--paper", "droppath", "--data", f"mnist={mnist}", "--out",
                     str(out), "--no-progress"])
        err = capsys.readouterr().err
    finally:
        holder.kill()
        holder.wait()
    assert code == 2 and str(holder.pid) in err, err
    assert sorted(p.name for p in out.iterdir()) == ["lock"]  # the holder's; the refused launcher wrote nothing


def test_fewer_gpus_than_planned_keep_the_papers_global_batch_or_train_nothing(tmp_path):
    """MAE ViT-B/16 is planned on 4 GPUs at 256 images each (the paper's global batch 1,024). On one GPU it trains with
    4 micro-batches accumulated per update (the same 1,024), on 3 it is refused with the reason (no whole
    accumulation keeps it), and a run launched on 4 is not continued on 2; U-ViT, whose config fixes its global batch
    (each process takes its share), needs nothing."""
    from lab.reproduce.launch import _queue, ledger_for

    images = tmp_path / "in100"
    for split in ("train/a", "val/a"):
        (images / split).mkdir(parents=True)
    plan = make_plan("gpu", ["decayed"], 1, {"imagenet100": images, "cifar100": images})

    def commands(devices: list[str], out: Path) -> tuple[dict, dict[str, list[str]]]:
        ledger = ledger_for(plan, out, "local")
        return ledger, {run.key: cmds[0] for run, cmds in _queue(plan, out, ledger, devices, False)}

    _, one = commands(["0"], tmp_path / "one")
    mae = one["mae-a1-s0"]
    assert "--nproc_per_node=1" in mae and "train.accum_steps=4" in mae  # 256 × 4 × 1 = 1,024
    uvit = one["uvit-a0.7-s0"]
    assert "--nproc_per_node=1" in uvit and not any(a.startswith("train.accum_steps") for a in uvit)
    ledger, three = commands(["0", "1", "2"], tmp_path / "three")
    assert "mae-a1-s0" not in three and ledger["runs"]["mae-a1-s0"]["state"] == "failed"
    assert "cannot keep it with whole accumulation steps" in ledger["runs"]["mae-a1-s0"]["message"]
    ledger = ledger_for(plan, tmp_path / "two", "local")
    ledger["runs"]["mae-a1-s0"].update(processes=4, folder=None)
    from lab.reproduce.launch import _same_global_batch

    with pytest.raises(ValueError, match="launched on 4 process"):
        _same_global_batch(plan.runs[0], 2, "resume", ledger["runs"][plan.runs[0].key])


def test_a_completed_folder_is_reused_only_for_todays_recipe(tmp_path):
    """A run folder that completed another recipe than today's plan (a setting of its overrides changed since) is not
    taken as done: it is reported failed naming the change, and with --retry-failed trains afresh in a new folder,
    the old one left as it is. ``reproduce.json`` records each run's recipe fingerprint."""
    from lab.reproduce.launch import _reuse, fingerprint, ledger_for, recipe

    mnist = tiny_data.mnist(tmp_path / "mnist")
    plan = make_plan("gpu-test", ["droppath"], 1, {"mnist": mnist})
    run = next(r for r in plan.runs if r.key == "table1-mnist-off-s0")
    ledger = ledger_for(plan, tmp_path / "out", "local")
    assert ledger["runs"][run.key]["recipe"] == fingerprint(recipe(run))
    folder = RunStore(tmp_path / "out" / "runs").create(run.key)
    same = recipe(run)
    folder.write_config(same)
    folder.write_status("completed", "done")
    record = {"state": "completed", "folder": f"runs/{folder.path.name}"}
    assert _reuse(run, folder, record, "done", False) == (folder, "done")
    folder.write_config({**same, "train": {**same["train"], "droppath": "residual_droppath"}})
    assert _reuse(run, folder, record, "done", False) == (folder, "failed")
    assert "train.droppath: 'residual_droppath' → 'off'" in record["message"] and record["state"] == "failed"
    record = {"state": "completed", "folder": f"runs/{folder.path.name}"}
    assert _reuse(run, folder, record, "done", True) == (None, "train") and record["folder"] is None
    assert folder.read_status()["state"] == "completed"  # the old folder as it was


def test_both_executors_decide_each_run_alike(tmp_path, monkeypatch):
    """One decision per run for the local and the SLURM executor (``decide``): from the same ledger and folders both
    take on the same runs (never made: train; trained with a step left: the step) and settle the same others (done;
    another recipe: failed, naming the change; failed in the ledger; a live lock: busy). Only SLURM knows of jobs:
    a run whose cluster job is still queued or running is left to it."""
    from types import SimpleNamespace

    from lab.jobs.submit import Resources
    from lab.reproduce import launch
    from lab.reproduce.launch import _queue, ledger_for, recipe, run_slurm

    images = tmp_path / "in100"
    for split in ("train/a", "val/a"):
        (images / split).mkdir(parents=True)
    plan = make_plan("gpu-test", ["decayed"], 1, {"imagenet100": images, "cifar100": images})
    runs = {run.key: run for run in plan.runs}

    def prepare(out: Path) -> dict:
        ledger = ledger_for(plan, out, "local")
        store = RunStore(out / layout.REPRODUCTION_RUNS)

        def folder(key: str, state: str, config: dict | None = None):
            made = store.create(key)
            made.write_config(config or recipe(runs[key]))
            made.write_status(state, "")
            ledger["runs"][key]["folder"] = f"{layout.REPRODUCTION_RUNS}/{made.path.name}"
            return made

        done = folder("mae-a0.8-s0", "completed")
        done.analysis_path(layout.PROBE).parent.mkdir(parents=True, exist_ok=True)
        done.analysis_path(layout.PROBE).write_text("{}")
        folder("mae-a0.6-s0", "completed")  # its probe left to do
        other = recipe(runs["mae-scaled_both-s0"])
        section, _, name = runs["mae-scaled_both-s0"].overrides[0].partition("=")[0].partition(".")
        folder("mae-scaled_both-s0", "completed", {**other, section: {**other[section], name: "another"}})
        ledger["runs"]["mae-scaled_branch-s0"].update(state="failed", message="diverged at step 3")
        busy = folder("mae-a0.6-nounet-s0", "running")
        (busy.path / layout.LOCK).write_text(json.dumps({"host": os.uname().nodename, "pid": os.getpid()}))
        ledger["runs"]["uvit-a1-s0"]["job_id"] = "41"
        return ledger

    local = prepare(tmp_path / "local")
    queued = {run.key: commands for run, commands in _queue(plan, tmp_path / "local", local, [], False)}

    submitted = []

    class Executor:  # submitit's, as far as run_slurm uses it
        def __init__(self, folder, cluster):
            pass

        def update_parameters(self, **parameters):
            pass

        def submit(self, job):
            submitted.append(job)
            return SimpleNamespace(job_id=str(len(submitted)), paths=SimpleNamespace(stdout="out", stderr="err"))

    monkeypatch.setattr(launch, "require", lambda module: SimpleNamespace(AutoExecutor=Executor))
    monkeypatch.setattr(launch, "_job_alive", lambda jobs, job_id, cluster: job_id == "41")
    slurm = run_slurm(plan, tmp_path / "slurm", prepare(tmp_path / "slurm"), Resources(executor="local"))

    settled = {"mae-a0.8-s0": "completed", "mae-scaled_both-s0": "failed", "mae-scaled_branch-s0": "failed",
               "mae-a0.6-nounet-s0": "busy"}
    for ledger in (local, slurm):
        assert {key: ledger["runs"][key]["state"] for key in settled} == settled
        assert "trained another recipe than today's plan" in ledger["runs"]["mae-scaled_both-s0"]["message"]
        assert ledger["runs"]["mae-scaled_branch-s0"]["message"] == "diverged at step 3"
    assert set(queued) == set(runs) - set(settled)
    assert [command[3] for command in queued["mae-a0.6-s0"]] == ["probe"]  # its step only: `python -m lab probe …`
    assert queued["mae-a1-s0"][0][2] == "torch.distributed.run" and "train" in queued["mae-a1-s0"][0]
    assert {key for key, record in slurm["runs"].items() if record["state"] == "submitted"} == \
        set(runs) - set(settled) - {"uvit-a1-s0"}
    assert slurm["runs"]["uvit-a1-s0"]["state"] == "busy" and len(submitted) == len(runs) - len(settled) - 1


RUN_KEY = "table1-mnist-off-s0"
HOSTILE_LEDGERS = {  # what is done to a launcher's reproduce.json, and what the refusal says
    "not JSON": (lambda ledger: "{not json", "is not JSON"),
    "a list": (lambda ledger: [ledger], "must hold a JSON object of a reproduction's plan; it holds a list"),
    "no budget": (lambda ledger: {k: v for k, v in ledger.items() if k != "budget"}, "budget is missing"),
    "a toy budget": (lambda ledger: {**ledger, "budget": "cpu"},
                     "budget must be one of gpu1, gpu, gpu-test; got 'cpu'"),
    "papers a string": (lambda ledger: {**ledger, "papers": "droppath"}, "papers must be a list; got 'droppath'"),
    "an unknown paper": (lambda ledger: {**ledger, "papers": ["x"]}, "papers[0] must be one of"),
    "data a list": (lambda ledger: {**ledger, "data": []}, "data must be an object; got []"),
    "runs a list": (lambda ledger: {**ledger, "runs": []}, "runs must be an object; got []"),
    "a run a string": (lambda ledger: {**ledger, "runs": {RUN_KEY: "x"}}, f"runs['{RUN_KEY}'] must be an object"),
    "a run's key a path": (lambda ledger: {**ledger, "runs": {"../../x": ledger["runs"][RUN_KEY]}},
                           "runs['../../x'] is not a run's name"),
    "processes a string": (lambda ledger: _run_set(ledger, processes="x"),
                           f"runs['{RUN_KEY}'].processes must be an integer in [1, 4096]; got 'x'"),
    "attempts negative": (lambda ledger: _run_set(ledger, attempts=-1), "attempts must be an integer in [0,"),
    "overrides a string": (lambda ledger: _run_set(ledger, overrides="train.lr=1"), "overrides must be a list"),
    "no config": (lambda ledger: _run_set(ledger, config=None), "config must be a string; got None"),
    "a step's args a string": (lambda ledger: _run_set(ledger, steps=[{"args": "probe", "output": "probe.json"}]),
                               "steps[0].args must be a list"),
    "a step's output a path": (lambda ledger: _run_set(ledger, steps=[{"args": [], "output": "../x.json"}]),
                               "steps[0].output must be a file name"),
    "an unknown state": (lambda ledger: _run_set(ledger, state="exploded"), "state must be one of"),
    "a folder number": (lambda ledger: _run_set(ledger, folder=5), "folder must be a string or null; got 5"),
    "an experiment of another run": (lambda ledger: {**ledger, "experiments": [
        {**ledger["experiments"][0], "runs": ["nope"]}]}, "experiments[0].runs[0] names no run of runs: 'nope'"),
    **{f"seeds {value!r}": (lambda ledger, value=value: {**ledger, "seeds": value},
                            f"seeds must be an integer in [1, 100]; got {value!r}")
       for value in (-1, 0, 1.5, "3", True, 10**9, None)},
}


def _run_set(ledger, **fields):
    return {**ledger, "runs": {RUN_KEY: {**ledger["runs"][RUN_KEY], **fields}}}


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    """A launcher's reproduce.json (the droppath paper's gpu-test runs on tiny MNIST), as it is before any run."""
    from lab.reproduce.launch import ledger_for, save_ledger

    root = tmp_path_factory.mktemp("planned")
    mnist = tiny_data.mnist(root / "mnist")
    out = root / "repro"
    out.mkdir()
    save_ledger(out, ledger_for(make_plan("gpu-test", ["droppath"], None, {"mnist": mnist}), out, "local"))
    return mnist, json.loads((out / "reproduce.json").read_text())


@pytest.mark.parametrize("damage", list(HOSTILE_LEDGERS))
def test_a_hand_edited_plan_file_is_refused_by_key_before_anything_is_written(planned, tmp_path, capsys, damage):
    """The attack: a ``reproduce.json`` edited by hand or by someone else (a list, a key missing or of another type,
    a run that is a string, seeds of any kind) gave a traceback, or passed silently. Collecting it and continuing it
    both refuse it, naming the key and why, before a report, a log or a run folder is written."""
    mnist, ledger = planned
    hostile, message = HOSTILE_LEDGERS[damage]
    value = hostile(json.loads(json.dumps(ledger)))
    out = tmp_path / "repro"
    out.mkdir()
    plan_file = out / "reproduce.json"
    plan_file.write_text(value if isinstance(value, str) else json.dumps(value))
    before = plan_file.read_bytes()
    for command in (["reproduce", "--collect", str(out)],
                    ["reproduce", "--budget", "gpu-test", "--paper", "droppath", "--data", f"mnist={mnist}", "--out",
                     str(out), "--no-progress"]):
        assert main(command) == 2, command
        err = capsys.readouterr().err
        assert message in err and f"{plan_file}:" in err and "Traceback" not in err, err
        assert len(err.strip().splitlines()) == 1, err
        assert sorted(p.name for p in out.iterdir()) == ["reproduce.json"] and plan_file.read_bytes() == before

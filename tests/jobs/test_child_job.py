"""Page jobs in child processes: controlled and drawn like thread jobs, failing alone, never outliving the server."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from lab.jobs import cores
from lab.jobs.child import NICE, PIPE_BYTES, ChildJob, _receive, _send, _widen
from lab.jobs.manager import JobManager
from lab.nn import registry
from lab.nn.mlp import ResidualMLP
from lab.runs.store import Run, RunStore
from lab.snapshots.snapshot import Snapshot
from lab.train.checkpoint import load_checkpoint
from tests.jobs.helpers import StuckStep, tiny, wait_for
from tests.waiting import scaled

pytestmark = pytest.mark.slow  # the fork server imports the lab once per test process

LONG = {"train.max_steps": 1_000_000, "train.epochs": 1_000_000, "train.eval_every": 25}


@pytest.fixture
def manager(tmp_path):
    m = JobManager(tmp_path / "runs", max_jobs=1, processes=True)
    yield m
    m.shutdown()


def test_a_snapshot_crosses_the_pipe_whole_writable_and_with_its_kind():
    """Snapshots cross as a header and their arrays' raw bytes (no copy into a pickle), through a widened pipe: what
    arrives equals what was sent, is a Snapshot of the same kind, and can be written to, as a thread job's can."""
    import fcntl
    import multiprocessing

    receive, send = multiprocessing.get_context("forkserver").Pipe(duplex=False)
    _widen(send)
    assert fcntl.fcntl(send.fileno(), fcntl.F_GETPIPE_SZ) >= PIPE_BYTES
    rng = np.random.default_rng(0)
    sent = Snapshot("nodes", {"maps": rng.standard_normal((33, 32, 26, 26), dtype=np.float32),  # 2.9 MB
                              "weights": rng.standard_normal((33, 32, 32))[:, ::2],  # not contiguous: in the header
                              "step": np.int64(40)})
    writer = threading.Thread(target=lambda: [_send(send, (0, "nodes", 7, sent)), _send(send, (0, None, None, None))])
    writer.start()
    k, kind, version, got = _receive(receive)
    assert (k, kind, version) == (0, "nodes", 7) and isinstance(got, Snapshot) and got.kind == "nodes"
    assert all(np.array_equal(got[name], sent[name]) for name in sent) and got["weights"].dtype == np.float64
    got["maps"][0, 0, 0, 0] = 1.0  # its own memory
    assert _receive(receive) == (0, None, None, None)
    writer.join()


def test_a_child_job_pauses_steps_resumes_publishes_and_stops_like_a_thread_job(manager):
    job = manager.start_thread(tiny(**LONG), paused=True, on_demand=("nodes",), cadence={"nodes": (1, 0.0)},
                               disk_every_s=0)
    assert isinstance(job, ChildJob) and job.is_paused()
    assert wait_for(lambda: job.status()["state"] == "paused", timeout=60), job.status()
    assert wait_for(lambda: job.latest("nodes") is not None)  # the paused snapshot, forced
    step = job.status()["step"]
    job.step(3)
    assert wait_for(lambda: job.status()["state"] == "paused" and job.status()["step"] == step + 3), job.status()
    # paused again: its snapshot (sent after its status is written) shows where it stopped
    assert wait_for(lambda: job.latest("nodes")[1]["step"] == step + 3), job.latest("nodes")[1]["step"]
    job.resume()
    assert wait_for(lambda: job.status()["state"] == "running")
    version = job.latest("nodes")[0]
    time.sleep(0.5)
    assert job.latest("nodes")[0] == version, "on demand: nothing built that nobody asked for"
    job.request("nodes")
    assert wait_for(lambda: job.latest("nodes")[0] > version)
    job.stop()
    status = job.status()
    assert status["state"] == "stopped" and not job.is_alive()
    assert load_checkpoint(job.run)["step"] == status["step"]
    records, _ = job.metrics_since(0)
    assert records and records[-1]["step"] <= status["step"]


def test_a_sweep_trains_in_a_child_and_is_controlled_and_drawn_like_a_sweep_job(manager):
    """One ensemble of an α_min sweep in a child: paused with its snapshot, single steps, on-demand rank snapshots, its
    members' metrics tagged by member; killed, it is reported failed and its members' folders stay."""
    from lab.config import load_config
    from lab.snapshots.kinds import RANK

    cfg = load_config("configs/spiral.yaml", ["model.depth=3", "model.width=8", "data.n=512", "model.shortcut=linear",
                                              "train.epochs=1000", "train.eval_every=10", "train.log_every=5"])
    job = manager.start_sweep((cfg, {"model.alpha_min": [1.0, 0.6]}), paused=True, cadence=(1, 0.0),
                              on_demand=True)
    assert isinstance(job, ChildJob) and job.run.path.name.endswith("sweep")
    assert wait_for(lambda: job.status()["state"] == "paused", timeout=60), job.status()
    assert wait_for(lambda: job.latest(RANK) is not None)  # the paused snapshot, forced
    assert int(job.latest(RANK)[1]["step"]) == 0
    job.step(5)
    assert wait_for(lambda: job.status()["state"] == "paused" and job.status()["step"] == 5), job.status()
    assert wait_for(lambda: int(job.latest(RANK)[1]["step"]) == 5)
    snapshot = job.latest(RANK)[1]
    assert snapshot.kind == RANK and snapshot["effective_rank"].shape == (2, 4)
    assert snapshot["alpha_min"].tolist() == pytest.approx([1.0, 0.6])
    records, cursor = job.metrics_since(0)
    assert sorted({(r["member"], r["step"]) for r in records if r["kind"] == "step"}) == [(0, 5), (1, 5)]
    job.resume()
    version = job.latest(RANK)[0]
    assert wait_for(lambda: job.status()["step"] > 30), job.status()
    job.request(RANK)
    assert wait_for(lambda: job.latest(RANK)[0] > version)
    more, _ = job.metrics_since(cursor)
    assert {r["member"] for r in more} == {0, 1} and min(r["step"] for r in more) > 5
    os.kill(job.proc.pid, signal.SIGKILL)
    assert wait_for(lambda: job.status()["state"] == "failed", timeout=5), job.status()
    assert job.status()["returncode"] == -signal.SIGKILL
    assert [m["state"] for m in job.run.read_status()["members"]] == ["failed", "failed"]
    for member in job.members:  # each member's own folder says so, and keeps its checkpoint
        assert member.read_status()["state"] == "failed" and member.has_checkpoint("last")


def test_runs_in_lockstep_train_in_one_child_at_one_step_and_fail_together(manager):
    """Two runs in lockstep in one child: each its own job (snapshots, status), paused at one step; one
    stopped, the other trains on alone; the child killed, the one still training is reported failed."""
    jobs = manager.start_lockstep([tiny(**LONG, **{"model.alpha_min": a}) for a in (1.0, 0.5)], names=["a", "b"],
                                  cadence={"nodes": (5, 0.0)}, disk_every_s=0)
    assert all(isinstance(j, ChildJob) for j in jobs) and jobs[0].proc is jobs[1].proc
    assert jobs[0].group is jobs[1].group is not None
    assert wait_for(lambda: all(j.latest("nodes") is not None and j.latest("nodes")[1]["step"] >= 5 for j in jobs),
                    timeout=60)
    for job in jobs:
        job.pause()
    assert wait_for(lambda: all(j.status()["state"] == "paused" for j in jobs)), [j.status() for j in jobs]
    steps = [j.status()["step"] for j in jobs]
    assert steps[0] > 0 and abs(steps[0] - steps[1]) <= 1, steps  # one may finish the step it was in
    for job in jobs:
        job.resume()
    jobs[0].stop()
    assert jobs[0].status()["state"] == "stopped" and not jobs[0].is_alive()
    step = jobs[1].status()["step"]
    assert jobs[1].is_alive() and wait_for(lambda: jobs[1].status()["step"] > step + 20), "the other goes on alone"
    os.kill(jobs[1].proc.pid, signal.SIGKILL)
    assert wait_for(lambda: jobs[1].status()["state"] == "failed", timeout=2), jobs[1].status()
    assert jobs[0].status()["state"] == "stopped", "a run that had ended keeps its own final state"


def placement(job: ChildJob) -> set[tuple[frozenset[int], int]]:
    """The (CPUs, nice) of every thread of ``job``'s child."""
    tids = [int(t) for t in os.listdir(f"/proc/{job.proc.pid}/task")]
    return {(frozenset(os.sched_getaffinity(t)), os.getpriority(os.PRIO_PROCESS, t)) for t in tids}


def test_a_cpu_child_trains_on_a_core_of_its_own_until_another_waits_and_frees_it_when_asked_to_stop(
        tmp_path, monkeypatch):
    """Every thread of a child alone (training, snapshots, writers) on the highest core, at the server's priority;
    asked to stop, it frees the core at once, while it still ends its (here: long) step, for the run that replaces
    it; a child that then finds no core free runs niced on every core, and the one with the core yields to it."""
    if not cores.candidates():
        pytest.skip("this machine has no core to spare")
    monkeypatch.setattr(cores, "ledger", lambda: tmp_path / "cores")  # this test's ledger, not the user's
    store, stuck, top = RunStore(tmp_path / "runs"), tmp_path / "stuck", cores.candidates()[0]
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    own, niced = {(frozenset({top}), mine)}, {(frozenset(os.sched_getaffinity(0)), min(mine + NICE, 19))}
    jobs = [ChildJob.training(tiny(**LONG), store.create("first"), disk_every_s=0,
                              callbacks=(StuckStep(str(stuck)),)).start()]
    try:
        assert wait_for(stuck.exists), jobs[0].status()
        assert placement(jobs[0]) == own
        jobs[0].stop(timeout=0)
        jobs.append(ChildJob.training(tiny(**LONG), store.create("second"), disk_every_s=0).start())
        assert wait_for(lambda: jobs[1].status().get("step", 0) > 0), jobs[1].status()
        assert jobs[0].proc.is_alive(), "the first still ends its step"
        assert placement(jobs[1]) == own, "the core the first freed when asked to stop"
        jobs.append(ChildJob.training(tiny(**LONG), store.create("third"), disk_every_s=0).start())
        assert wait_for(lambda: jobs[2].status().get("step", 0) > 0), jobs[2].status()
        assert placement(jobs[2]) == niced
        assert wait_for(lambda: placement(jobs[1]) == niced, timeout=10), placement(jobs[1])
    finally:
        jobs[0].kill()
        for job in jobs[1:]:
            job.stop()
    assert [job.status()["state"] for job in jobs[1:]] == ["stopped", "stopped"]


def test_a_killed_child_is_reported_failed_with_its_exit_code_and_the_server_goes_on(manager):
    job = manager.start_thread(tiny(**LONG), disk_every_s=0)
    assert wait_for(lambda: job.run.has_checkpoint("last"), timeout=60), job.status()
    os.kill(job.proc.pid, signal.SIGKILL)  # out of memory, or a crash in native code
    assert wait_for(lambda: job.status()["state"] == "failed", timeout=2), job.status()
    status = job.status()
    assert "exited with code -9" in status["message"] and status["returncode"] == -9
    assert load_checkpoint(job.run)["step"] > 0, "its last checkpoint stays"
    other = manager.start_thread(tiny(**{"train.max_steps": 30}), disk_every_s=0)  # the slot is free again
    assert other.wait(60)["state"] == "completed"


def test_a_child_stops_when_its_server_dies(tmp_path):
    """A server killed outright (no shutdown) leaves no job training: its children see their pipe close."""
    script = textwrap.dedent(f"""
        import time
        from lab.jobs.manager import JobManager
        from tests.jobs.helpers import tiny
        if __name__ == "__main__":
            manager = JobManager({str(tmp_path / 'runs')!r}, max_jobs=1, processes=True)
            job = manager.start_thread(tiny(**{LONG!r}), disk_every_s=0)
            while job.status()["state"] != "running":
                time.sleep(0.05)
            print(job.proc.pid, job.run.path, flush=True)
            time.sleep(600)
    """)
    server = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                              cwd=Path(__file__).resolve().parents[2])
    try:
        pid, run_path = server.stdout.readline().split()
        server.kill()
        server.wait()

        def gone() -> bool:
            try:
                os.kill(int(pid), 0)
            except ProcessLookupError:
                return True
            return False

        assert wait_for(gone, timeout=30), "the child trains on without its server"
    finally:
        server.kill()
    assert Run(Path(run_path)).read_status()["state"] == "stopped"


@pytest.mark.parametrize("deaf", [False, True], ids=["stuck", "deaf-to-SIGTERM"])
def test_a_stop_during_a_long_step_returns_at_once_escalates_and_is_recorded_stopped(manager, deaf, tmp_path):
    """Reset during a long evaluation: the session does not wait; the child gets its grace period, then SIGTERM,
    then SIGKILL (which a child ignoring SIGTERM needs), and the run is recorded stopped, as the user asked."""
    stuck = tmp_path / "stuck"
    job = manager.start_thread(tiny(**LONG), disk_every_s=0, callbacks=(StuckStep(str(stuck), deaf=deaf),))
    assert wait_for(stuck.exists, timeout=60), job.status()
    job.stop(timeout=0, grace=scaled(2.0))
    assert job.is_alive(), "the caller does not wait: the child, asleep in its step, is ended by the grace thread"
    assert job.stopping and manager.training() == [], "a job that is ending holds no slot"
    assert wait_for(lambda: not job.is_alive(), timeout=10), job.status()
    status = job.status()
    signal_name = "SIGKILL" if deaf else "SIGTERM"
    assert status["state"] == "stopped" and f"ended by {signal_name}" in status["message"], status
    assert status["returncode"] == (-9 if deaf else -15)
    assert job.run.read_status()["state"] == "stopped", "recorded in the run folder"


def test_reset_during_an_evaluation_ends_both_runs_of_a_lockstep_pair_cleanly(manager, tmp_path):
    """Reset on a page that trains two runs in lockstep, while they evaluate: each follower asks its job to stop and
    drops it, so nobody reads their statuses again (before, the child was killed after its grace and both runs stayed
    ``running`` with their ``lock`` for good). The server that ended the child records both runs stopped and removes
    their locks, which name a process that is gone."""
    stuck = tmp_path / "stuck"
    jobs = manager.start_lockstep([tiny(**LONG, **{"model.alpha_min": a}) for a in (1.0, 0.5)], names=["a", "b"],
                                  disk_every_s=0, callbacks=(StuckStep(str(stuck)),))
    assert wait_for(stuck.exists, timeout=60), [j.status() for j in jobs]
    runs, proc = [j.run for j in jobs], jobs[0].proc
    assert all((r.path / "lock").exists() for r in runs)
    for job in reversed(jobs):  # as TrainingPage._reset: the jobs that follow the first stop before it
        job.stop(timeout=0, grace=0.5)
    del jobs
    assert wait_for(lambda: not proc.is_alive(), timeout=10)
    assert wait_for(lambda: all(r.read_status()["state"] == "stopped" for r in runs), timeout=5), \
        [r.read_status() for r in runs]
    assert not any((r.path / "lock").exists() for r in runs), "a lock naming a process that is gone"
    assert all("ended by SIGTERM" in r.read_status()["message"] for r in runs)


def test_a_hostile_cores_folder_neither_stalls_nor_redirects_a_child(tmp_path, monkeypatch):
    """The attack of another user on the machine: the shared temp folder's ``residual-lab-cores`` with its probing
    lock held for good, a FIFO for ``waiting.lock`` and a core's lock file a link to a victim (before, every child
    waited on that lock without end: nothing trained, and Stop ended in SIGKILL). A child uses the user's own
    ledger, never that folder: it trains, and stops within 2 s. A ledger that is not the user's alone (a link, open
    to others) is not used at all: the child takes no core and still trains."""
    import fcntl
    import tempfile

    shared = Path(tempfile.gettempdir()) / "residual-lab-cores"
    shared.mkdir(exist_ok=True)
    planted = [shared / "probing.lock", shared / "waiting.lock", *(shared / f"{c}.lock" for c in cores.candidates())]
    saved = {p: p.read_bytes() for p in planted if p.is_file() and not p.is_symlink()}
    victim = tmp_path / "victim"
    victim.write_text("precious")
    for path in planted:
        if os.path.lexists(path):
            path.unlink()
    holder = open(shared / "probing.lock", "wb")  # noqa: SIM115 (held for the test's length)
    fcntl.flock(holder.fileno(), fcntl.LOCK_EX)
    os.mkfifo(shared / "waiting.lock")
    for path in planted[2:]:
        os.symlink(victim, path)
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    store = RunStore(tmp_path / "runs")
    try:
        own = runtime / "residual-lab" / "cores"
        assert cores.ledger() == own
        for setup in (lambda: None, lambda: own.chmod(0o777),
                      lambda: (own.rename(runtime / "was"), own.symlink_to(shared))):
            setup()
            job = ChildJob.training(tiny(**LONG), store.create("child"), disk_every_s=0).start()
            try:
                assert wait_for(lambda job=job: job.status().get("step", 0) > 0, timeout=60), job.status()
            finally:
                stopping = threading.Thread(target=job.stop)
                stopping.start()
                stopping.join(scaled(30))
            assert not stopping.is_alive() and job.status()["state"] == "stopped"
        assert cores.ledger() == Path.home() / ".cache" / "residual-lab" / "cores"  # a link: the user's own instead
        assert victim.read_text() == "precious"
    finally:
        holder.close()
        for path in planted:
            if os.path.lexists(path):
                path.unlink()
        for path, data in saved.items():
            path.write_bytes(data)


@registry.signature_of(ResidualMLP)
def server_only_mlp(**kwargs):
    return ResidualMLP(**kwargs)


@pytest.fixture
def server_only_model(monkeypatch):
    """``server_only_mlp`` registered in this process alone, as a notebook cell registers a model: a page's child
    (forked from the fork server, which imported the lab afresh) does not know it."""
    monkeypatch.setattr(registry, "_MODELS", dict(registry._MODELS))
    monkeypatch.setattr(registry, "_INFO", dict(registry._INFO))
    registry.register_model(family="residual_mlp", input_shape=(2,))(server_only_mlp)


def test_a_child_that_cannot_make_its_runs_records_why_in_each_of_them(tmp_path, server_only_model):
    """The child cannot build the config it was sent: each of its runs says so, with the error, and that there is no
    checkpoint to resume from, not only that a process exited."""
    manager = JobManager(tmp_path / "runs", max_jobs=2, processes=True)
    try:
        cfg = tiny(**{"model.name": "server_only_mlp"})
        jobs = [manager.start_thread(cfg, disk_every_s=0), *manager.start_lockstep([cfg, cfg], disk_every_s=0)]
        for job in jobs:
            status = job.wait(60)
            assert status["state"] == "failed" and status["step"] == 0, status
            assert status["message"].startswith("ConfigError: model.name: unknown model 'server_only_mlp'; "
                                                "registered: "), status["message"]
            assert status["message"].endswith("; no checkpoint yet") and "Traceback" in status["traceback"]
            assert job.run.read_status() == status, "recorded in the run folder"
    finally:
        manager.shutdown()


def test_a_setting_refused_before_training_is_recorded_in_the_run(tmp_path):
    """A child sent a setting its run refuses before it trains (one the manager would have refused in the server):
    the run says which, not that its process exited."""
    run = RunStore(tmp_path).create("refused")
    job = ChildJob.training(tiny(**{"train.engine": "tensor", "train.ema": 0.9}), run, disk_every_s=0).start()
    status = job.wait(60)
    assert status["state"] == "failed", status
    assert status["message"] == ("ConfigError: train.ema=0.9 is a setting of the loader engine; set "
                                 "train.engine=loader; no checkpoint yet")


PLAIN_MODELS = '''
"""A plugin model without forward_intermediates (so no node maps), and a snapshot any model gives."""

import numpy as np
from torch import nn

from lab.nn.registry import register_model


@register_model(family="plain", input_shape=(2,))
def plain_mlp(width: int = 8, in_dim: int = 2, num_classes: int = 2):
    return nn.Sequential(nn.Linear(in_dim, width), nn.ReLU(), nn.Linear(width, num_classes))


def weight_norms(model):
    return {"norms": np.array([float(p.detach().norm()) for p in model.parameters() if p.ndim == 2], np.float32)}
'''


def test_a_kind_the_model_cannot_give_is_dropped_with_a_note_and_the_run_trains_on(tmp_path):
    """A page's run of a plugin model without ``forward_intermediates``: its node maps raise from the first
    snapshot (on_train_start) on; the run completes, its status notes the kind and the error, and the other kind is
    published to its last step."""
    (tmp_path / "plain_models.py").write_text(PLAIN_MODELS)
    script = textwrap.dedent(f"""
        import json
        from lab.config import ExperimentConfig, apply_overrides
        from lab.snapshots.builders import nodes_snapshot
        from lab.jobs.manager import JobManager
        from plain_models import weight_norms

        manager = JobManager({str(tmp_path / 'runs')!r}, max_jobs=1, processes=True)
        cfg = apply_overrides(ExperimentConfig(), {{"name": "plain", "model.name": "plain_mlp", "data.n": 1024,
                                                   "train.batch_size": 32, "train.max_steps": 30,
                                                   "train.eval_every": 10}})
        job = manager.start_thread(cfg, disk_every_s=0, cadence={{"nodes": (5, 0.0), "norms": (5, 0.0)}},
                                   builders={{"nodes": nodes_snapshot, "norms": weight_norms}})
        status = job.wait(120)
        print(json.dumps({{"status": status, "kinds": job.kinds(), "norms": int(job.latest("norms")[1]["step"]),
                          "folder": job.run.read_status()}}))
        manager.shutdown()
    """)
    env = {**os.environ, "LAB_PLUGINS": "plain_models", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(tmp_path), str(Path(__file__).resolve().parents[2])])}
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.splitlines()[-1])
    status = got["status"]
    assert status["state"] == "completed" and status["step"] == 30, status
    (note,) = status["notes"]
    assert note.startswith("nodes snapshots are off for this run: their builder raised AttributeError: "), note
    assert "forward_intermediates" in note
    assert got["kinds"] == ["norms"] and got["norms"] == 30
    assert got["folder"] == status


import panel as pn

from lab.ui import DataPage, LabShell
from tests.jobs.helpers import tiny
from tests.ui.driving import shown


def test_shell_builds_and_navigates(manager):
    shell = LabShell(manager=manager)
    assert shell.page == "Playground" and list(shell.param.page.objects) == ["Playground", "Alignment", "Rank",
                                                                              "Diffusion", "Runs", "Data"]
    shell.page = "Data"
    assert isinstance(shell.get_page("Data"), DataPage) and len(shell.main) == 1
    assert isinstance(shell.template(), pn.template.FastListTemplate)
    assert isinstance(shell.__panel__(), pn.Row)


def test_a_link_to_a_page_builds_that_page_first_and_only(manager, monkeypatch):
    """A served ``?page=Data`` builds the Data page alone: the first page (the Playground, a model's forward pass and
    its document) is no longer made only to be left when the URL is synced; a name that is no page falls back."""
    args = {"page": [b"Data"]}
    monkeypatch.setattr(type(pn.state), "session_args", property(lambda self: args))
    shell = LabShell(manager=manager)
    assert shell.page == "Data" and list(shell._pages) == ["Data"]
    args["page"] = [b"<nope>"]
    assert LabShell(manager=manager).page == "Playground"


def test_data_page_draws_the_chosen_set(manager):
    page = DataPage(manager=manager)
    first = page.data_pane.object
    page.param.update(dataset="xor", n=300, noise=0.2)
    assert page.data_pane.object is not first
    assert "xor: 240 train" in page.data_pane.object.opts.get().kwargs["title"]
    cfg = page.config()
    assert (cfg.data.name, cfg.data.n, cfg.data.noise, cfg.train.max_steps) == ("xor", 300, 0.2, 400)
    assert (cfg.model.depth, cfg.model.width) == (32, 32)  # the lab default model


def test_train_button_runs_in_background_and_shows_result(manager):
    page = DataPage(manager=manager, n=400, steps=30)
    page.param.trigger("train")
    assert page.job is not None
    page.job.wait(60)
    page.poll()
    assert page.job.status()["state"] == "completed"
    assert "completed" in page.follower.status.message and "step 30 / 30" in page.follower.status.message
    assert page.decision.pane.title == "Decision boundary at step 30"
    assert page.curves.points()["eval:test_acc"] > 0


def test_busy_manager_and_second_click_are_reported(manager):
    other = manager.start_thread(tiny())  # training: it holds the one slot (a paused job holds none)
    page = DataPage(manager=manager, n=400, steps=30)
    page.param.trigger("train")
    assert page.job is None and page.follower.status.alert.visible
    assert "busy: 1 of 1" in shown(page.follower.status.alert)
    other.stop()

"""The comparison of runs: what differs between their configs, said as it is."""

from lab.ui.views.run_compare import CompareViews


def test_configs_that_could_not_be_read_are_not_called_the_same():
    """Two runs whose configs were refused (20,000 keys, 900 levels) read as empty configs: the comparison names them
    rather than calling them the same; two readable ones that differ name the setting."""
    views = CompareViews()
    records = [[{"kind": "eval", "step": 10, "test_acc": 0.5}]] * 2
    views.show(["a", "b"], [{}, {}], records)
    assert "nothing readable" in views.summary.object and "No config could be read from `a`, `b`" in \
        views.summary.object and "the same configs" not in views.summary.object
    views.show(["a", "b"], [{"model": {"depth": 4}}, {"model": {"depth": 8}}], records)
    assert "differ in `model.depth`" in views.summary.object and "No config" not in views.summary.object
    views.show(["a", "b"], [{"model": {"depth": 4}}] * 2, records)
    assert "nothing: the same configs" in views.summary.object

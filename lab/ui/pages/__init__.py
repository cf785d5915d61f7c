"""The lab's pages, one module each: :mod:`~lab.ui.pages.playground`, :mod:`~lab.ui.pages.alignment`,
:mod:`~lab.ui.pages.rank`, :mod:`~lab.ui.pages.diffusion`, :mod:`~lab.ui.pages.runs` and
:mod:`~lab.ui.pages.data`, on the bases
:class:`~lab.ui.pages.page.Page` (settings, notice, job follower, layout) and
:class:`~lab.ui.pages.training.TrainingPage` (start, pause, step, reset and exports of a page that trains), with
their settings declared in :mod:`~lab.ui.pages.knobs` tables."""

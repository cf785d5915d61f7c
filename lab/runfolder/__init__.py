"""The run-folder format, at the bottom of the lab: what a run folder holds and how it is read and written safely.

Everything else (training, the pages, the reports, other programs) reads and writes run folders through these
modules, and they import nothing of the rest of the lab, nor torch: reading the format costs numpy, yaml and a few
modules of the standard library.

* :mod:`~lab.runfolder.layout`: every entry's name, the run states and the checkpoint names;
* :mod:`~lab.runfolder.entries`: reading an entry within bounds (sizes, shapes, FIFOs, links);
* :mod:`~lab.runfolder.writes`: writing one without following a planted link, replaced whole (:func:`~.atomic_path`);
* :mod:`~lab.runfolder.lock`: the one-writer lock of a run, and this user's private folder for machine-local state.
"""

"""Reports computed from finished run folders: Residual Alignment (RA1–RA4 and Neural Collapse), linear probes of
the features, and the rank–probe table of a sweep. Each reads a run folder (:mod:`lab.runs`) and writes its result
under the run's ``analysis/``."""

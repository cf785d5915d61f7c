"""What the pages draw: figures built once and then updated in place from a job's metrics and snapshots (node grid,
decision map, curves, α bars, rank and alignment views, a run's curves, a job's status line), and the plot ranges
fitted to their data (:func:`~lab.ui.views.ranges.finite_range`)."""

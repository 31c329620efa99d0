"""`poolkit compare`: score every pooling candidate on the user's own data.

Modules: :mod:`~poolkit.compare.datasets` (task files), :mod:`~poolkit.compare.retrieval`
(BEIR / pair files, exact search, retrieval metrics), :mod:`~poolkit.compare.clustering`
(MTEB's k-means protocol), :mod:`~poolkit.compare.candidates` (what gets compared),
:mod:`~poolkit.compare.grouping` (rows that cannot differ), :mod:`~poolkit.compare.runner`
(one forward pass, all candidates), :mod:`~poolkit.compare.probes` (logistic regression),
:mod:`~poolkit.compare.metrics`, :mod:`~poolkit.compare.evaluation` (per-row results kept for
resampling), :mod:`~poolkit.compare.bootstrap` (paired bootstrap),
:mod:`~poolkit.compare.summary` (rows with intervals and paired tests),
:mod:`~poolkit.compare.timing` (model time), :mod:`~poolkit.compare.report` (table, JSON, plot).
"""

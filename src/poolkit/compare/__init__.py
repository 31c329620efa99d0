"""`poolkit compare`: score every pooling candidate on the user's own data.

Modules: :mod:`~poolkit.compare.datasets` (task files), :mod:`~poolkit.compare.candidates`
(what gets compared), :mod:`~poolkit.compare.runner` (one forward pass, all candidates),
:mod:`~poolkit.compare.probes` (logistic regression), :mod:`~poolkit.compare.metrics`,
:mod:`~poolkit.compare.report` (table, JSON, plot).
"""

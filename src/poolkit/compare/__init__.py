"""`poolkit compare`: score every pooling candidate on the user's own data.

:mod:`~poolkit.compare.runner` runs one forward pass per data file and derives every
candidate from it; :mod:`~poolkit.compare.report` prints the table, the JSON and the plot.
"""

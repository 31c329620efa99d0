"""Ray Data integration (optional extra ``poolkit[ray]``): embed a corpus on a Ray cluster.

- :class:`Embedder`: a callable class for ``Dataset.map_batches`` with an actor pool; each
  actor loads the model once (a :class:`poolkit.Encoder`) and pools with
  :func:`poolkit.embed`, so the numbers are those of one machine.
- :func:`embed_dataset`: ``ray.data.Dataset`` in, the same rows plus one embedding column
  per strategy out, with actor restarts and task retries configured.
- :func:`prepare`: the checks an :class:`Embedder` makes against its model as it starts, for a
  driver to run first where the model is at hand (a worker that fails to start gives a Ray
  traceback after Ray's retries).
- :func:`read_corpus`: files (a file, a folder, a glob) to a ``Dataset`` of ``id``,
  ``text_id``, ``text``, with the row ids ``poolkit embed`` gives the same texts.

Importing this module never needs Ray; using it without Ray raises
:class:`RayNotInstalledError`, one line naming ``pip install 'poolkit[ray]'``.
"""

from __future__ import annotations

from poolkit.ray._embedder import Embedder, embed_dataset, prepare
from poolkit.ray._require import INSTALL_HINT, RayNotInstalledError, require_ray
from poolkit.ray._sources import INPUT_ID, Corpus, FileIds, list_inputs, read_corpus

__all__ = [
    "INPUT_ID",
    "INSTALL_HINT",
    "Corpus",
    "Embedder",
    "FileIds",
    "RayNotInstalledError",
    "embed_dataset",
    "list_inputs",
    "prepare",
    "read_corpus",
    "require_ray",
]

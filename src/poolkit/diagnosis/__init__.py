"""Which pooling made these vectors: :func:`diagnose` and the sources of vectors it reads.

- :mod:`.space`: the candidates (every pooling of one forward pass, finished every way);
- :mod:`.agreement`: row-by-row agreement with the vectors, and what differs when none fits;
- :mod:`.verdict`: the found recipe against the model's intended one, in one line, and the fix;
- :mod:`.search`: the passes (one per truncation length and prompt, only as needed);
- :mod:`.sources`: vectors from files (``.npy``, Parquet, JSON Lines, JSON) and deployments
  (an ONNX graph, a sentence-transformers folder, a TEI or OpenAI-compatible server).
"""

from poolkit.diagnosis.search import Diagnosis, diagnose

__all__ = ["Diagnosis", "diagnose"]

"""Reading texts from files and writing embeddings to files, part by part.

Readers yield lists of texts (``chunk_size`` at a time: the parts of ``poolkit embed
--part-size``) so memory stays bounded and the embed loop can restart per part; writers
accept parts and publish the output file only when complete (temporary file + atomic
rename).
"""

from poolkit.io.atomic import atomic_write
from poolkit.io.readers import INPUT_FORMATS, InputError, read_texts
from poolkit.io.writers import OUTPUT_FORMATS, EmbeddingWriter, open_writer

__all__ = [
    "INPUT_FORMATS",
    "OUTPUT_FORMATS",
    "EmbeddingWriter",
    "InputError",
    "atomic_write",
    "open_writer",
    "read_texts",
]

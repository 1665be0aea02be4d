"""Recovery manifests: files on a shared filesystem naming the rows a restore will still need.

One reader per format (docs/configuration.md, "Manifests"; what the config asks of a source of each:
tq_gc/formats/manifest_formats.py), each a FormatReader (base.py) registered in readers.py:

native.py            native: a tq-gc/manifest/v1 document (tq_gc/formats/native_manifest.py)
json_document.py     json: one JSON document, keys at the source's key_path
json_lines.py        jsonl: JSON lines, keys at the key_path of each line
nemo_rl_recovery.py  nemo_rl_recovery: a NeMo RL recovery point's files (the nemo_rl/ package)

source.py reads every configured source through them (ManifestsSource, the reference source of a sweep);
files.py and text.py are what the file formats share: reading a file's bytes, parsing JSON text.
"""

from tq_gc.references.manifests.base import FormatReader, SourceSummary
from tq_gc.references.manifests.readers import READERS, reader_of
from tq_gc.references.manifests.source import READS_PER_SWEEP, ManifestsSource, MatchedFiles, read_manifest

__all__ = [
    "READERS",
    "READS_PER_SWEEP",
    "FormatReader",
    "ManifestsSource",
    "MatchedFiles",
    "SourceSummary",
    "read_manifest",
    "reader_of",
]

"""What tq-gc's inputs look like, as pure definitions: the config validates with them (config/), the
readers read by them (references/), the publishers write by them (publish/).

keypath.py          dotted key paths into JSON-like documents (`continuation.staging_keys`)
keytemplate.py      owner key templates (`{run}/{uid}`)
globs.py            absolute glob patterns split at their base directory
native_manifest.py  the native manifest document, tq-gc/manifest/v1: its fields, states and rows
manifest_formats.py the manifest formats a source may name, and what a source of each needs

No I/O, and no import of any other part of tq_gc: every folder may use these, and none of them ties two
folders together.
"""

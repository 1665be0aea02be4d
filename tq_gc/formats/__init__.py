"""What tq-gc's inputs look like, as pure definitions: the config validates with them (config/), and the
readers read by them (references/).

keypath.py          dotted key paths into JSON-like documents (`continuation.staging_keys`)
keytemplate.py      owner key templates (`{run}/{uid}`)
globs.py            absolute glob patterns split at their base directory

No I/O, and no import of any other part of tq_gc: every folder may use these, and none of them ties two
folders together.
"""

# A package, so that its conftest is `chaos.conftest` and leaves the module named `conftest` (the
# integration fixtures, which test modules import from) alone.

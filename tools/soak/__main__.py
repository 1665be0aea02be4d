"""`python -m tools.soak` from the repository root: what scripts/soak runs."""

from tools.soak.cli import main

raise SystemExit(main())

"""`python -m tools.soak` from the repository root: what scripts/soak runs."""

from tools.soak.run import main

raise SystemExit(main())

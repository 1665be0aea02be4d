"""`python -m soak` (with tests/integration and tests on the path: scripts/soak sets them)."""

from soak.run import main

raise SystemExit(main())

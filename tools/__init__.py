"""Developer tools beside the tests: the soak (tools/soak/) and the testbed it shares with the tests
(tools/testbed/). Not part of the tq-gc package."""

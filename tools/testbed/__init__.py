"""What the tests and the soak both start and drive: a Ray head of their own (ray_head), a throwaway
redis-server (redis_server), the tq-gc CLI's environment (cli), a verl-shaped trainer (verl_job).

It imports tq_gc and third-party packages only, never a test module or a conftest, so that tools/soak/
runs as `python -m tools.soak` from the repository root, with nothing on PYTHONPATH.
"""

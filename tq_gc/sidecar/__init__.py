"""The sidecar: a named Ray actor inside the training job that sweeps on a schedule (APScheduler) and
hosts the embedded state (actor.py), and the calls that start it and reach it (client.py)."""

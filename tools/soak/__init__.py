"""The soak (`scripts/soak --minutes N [--seed S]`): tq-gc against a job that never stops moving its
references, while sweepers die and Redis forgets everything.

It starts its own redis-server, its own Ray head and, as the training job, a real TransferQueue; then,
for N minutes:

- publishers hold staging rows and move each between an admission, a `rollout_data` row whose route
  plan names it, and a checkpoint manifest (written atomically under a fence), make-before-break: the
  new reference exists before the old one is removed; renewing admissions, and re-admitting at once
  when `renew` says one is gone (Redis restarted empty); manifests change only while the job
  checkpoints (now and then), so that sweeps delete between checkpoints while the other moves go on;
  every move follows the protocol (inside an admission of the row, unless it moves into one); hot
  publishers flip a row admission <-> tag back to back, and hopping ones move a row between all three
  every 0.2-0.5 s (manifests written by rename, removed by unlink or retire, no fence): many hops
  within each sweep;
- publishers share admission ids (`call-N`) and one fence name (`checkpoint`), as ranks do: each holds
  its own (tq_gc/publish/holders.py); one more publisher connects as an ACL user that is refused
  everything now and then (refusals): told at once (StoreRefused), it gives up the admissions whose
  renewal was refused;
- a leaker writes staging rows nothing references, and admissions it never renews;
- three sweepers share one Redis: the sidecar (every second) and two `tq-gc sweep --execute --json`
  loops, one of them SIGKILLed at random moments; Redis is restarted empty at random moments;
- a checker holds the ground truth of every reference and checks that no referenced row is missing.
- the sidecar and cli-b list the staging partition by the change journal, in its check mode: each
  listing that re-read only what changed is followed by a full listing and compared with it, but at the
  global indexes the journal says were touched since (journal_checks).

Then the chaos stops, sweeps go on for grace + a lease TTL + 3 intervals, and one line says how many
referenced rows were deleted and how many orphans were left (both must be 0), and the sweeps by outcome.
The line also says how many journalled listings were compared and how many differed. Exit 0 only if
both are 0, some sweep deleted rows while references moved, and journalled listings were compared and
none differed; 1 otherwise; 2 if the soak itself broke.

It is a tool with a pass/fail verdict, not a test module: `python -m tools.soak` from the repository
root (what scripts/soak runs), with nothing on PYTHONPATH. Besides tq_gc it imports only the testbed it
shares with the tests (tools/testbed/: the redis-server it kills and restarts, its own Ray head, the CLI's
environment), never a conftest or a test module.
It uses tq-gc's public surfaces only (the CLI, start_sidecar and its handle, AdmissionRegistry, the
native manifest format) and TQ's own API, so that the collector's internals can change under it.

Its modules: cli (the command line: parse_args, main), driver (Soak: services, anchors, actors, sweepers,
chaos, settling, the verdict's facts), settings, verdict; the job (job_tq: its TQ, partitions and route-plan
tags; manifest_files; actor_controls: switches, timing, pace; publisher; leaker); checker, chaos (Redis
restarts, checkpoints), refusals (the refused publisher's ACL user), sweepers, journal_checks (the change
journal's checks summed), truth (the ground truth), interrupts (SIGTERM, Ctrl-C); and verl, the
verl soak (`python -m tools.soak.verl`, scripts/soak-verl), a tool of its own.
"""

"""Where video jobs run (`engine: execution`): in the daemon's worker threads, or in worker
processes that decode, augment and lay clips out straight into the batches' shared memory, so
the daemon's interpreter only plans, dispatches and serves (docs/design.md#execution).

- `channel`: messages and descriptors between the daemon and one worker (a Unix socket).
- `shm`: batch buffers and frames in memfd-backed shared memory, found again by descriptor.
- `pool`: the daemon's side: a pool of worker processes; a job's store calls answered.
- `worker`: the worker's side: a job's pass (`sched.work.video_steps`) on shared buffers.

The setting's values are `config.settings.EXECUTIONS`; `auto` picks one of the two by the
cores the workers can use (`config.settings.resolve_execution`).
"""

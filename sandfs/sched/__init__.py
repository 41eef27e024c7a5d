"""Scheduling view materialization (SAND §5.4): a pure priority policy and its executor.

One writer per piece of state: each is changed only by its owner's methods, which the modules in
the last column call; everyone else reads it. All of it lives on the trio thread (a job's thread
reads `BatchBoard.demanded` only, to ask whether it is empty).

    state                                     owner, the only writer        its methods' callers
    tasks, positions, windows, future ones    windows.WindowBook (0)        planning, scheduler
    batches planned and ready (their readers  board.BatchBoard              planning, scheduler
    left), pending clips, their urgency
    order, what pruning keeps on disk;
    states of batches in flight               (`onboard.OnBoard`: the board's)
    `demanded`, `waiting`: readers' demand    board.BatchBoard (1)          scheduler, planning
    the board's views failed or in flight     flights.Flights               board, scheduler
    frames carried ahead, their bytes         carry.CarryBook (2)           scheduler, planning
    running jobs                              scheduler.Scheduler (3)       -
    passes paused or pausing, clips handed    passes.PassBook (4)           scheduler
    failed views, per task                    plan.failures.ViewFailures    scheduler, planning

`planning` is `WindowPlanner`: its methods are in planning.py and, for tasks joining and
leaving, joining.py, for the batch a reader comes to, anticipation.py. (0)
`add_window`/`drop_window`/`extend`/`merge` keep the index from a plan key to its windows
true. (1) `wait_started`/`wait_ended` (a reader blocked in `Scheduler.wait_view`),
`anticipate`/`unanticipate` (`WindowPlanner`), and the board's own completion, failures and
drops; its mirror for worker processes, the pool's pause gate, is set by
`Scheduler._gate_pauses` only. (2) `claim`/`release` (the windows a running pass carries for),
`hold`/`written` (carried bytes waiting to be written), `note_on_disk`/`forget`. (3) `_start`
and `_finish`; `memory` and `admission` get a read-only view of it. (4) `will_pause`, `pause`,
`resume`, `no_job_took_the_worker`, `hand_over`, `ended`.

`reads.ReaderSide` is the scheduler's own (its base class): what readers tell it and ask.
`memory.MemoryLedger`, `admission.Admission` and `choosing.JobChooser` own no state: they
derive what a job may take, and which job runs next, from the board, the carry book and the
running jobs. `parts.WindowParts` is the planner's own record of a window planned in parts
(its videos planned, each task's frontier); it reads the book's plans and positions. `work`
runs in worker threads on frozen records (`jobs`) and touches none of it; with `engine:
execution: processes` a video job's `work` runs in a worker process (`sandfs.execution`),
whose daemon thread only relays.

A window's pending clips are its videos' use columns (`WindowBook`'s window plan's) less those
taken, a byte a use (`pending.PendingClips`), its jobs numbers there and in the urgency
order (a `jobs.VideoJobKey` made when asked for); a job's clips read from it, or held loose, are
tuples or `plan.uses.ColumnUses`, immutable both, so an owner can only replace them.
`tests/unit/test_sched_ownership.py` checks the table's writers and that the modules import
one another without a cycle.
"""

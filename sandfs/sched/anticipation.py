"""The batch a task's reader comes to: until the reader comes, the batch where its task
stands counts as waited for. `WindowPlanner` holds the state (`anticipated`, `_readers_came`);
these are its methods, in a module of their own."""

from __future__ import annotations

from sandfs.plan.window import WindowPlan, view_key


class Anticipation:

    def _anticipate(self, plan: WindowPlan) -> None:
        """Until a task's reader comes, the batch where the task stands counts as waited for
        once its window is planned: the reader comes soon (a training script that starts with
        the mount is still importing torch), and the passes that batch needs should not make
        later epochs' clips first (`Scheduler._should_pause`): a cold mount's first batch came
        0.07 s sooner (docs/performance.md#cold-start)."""
        for task, task_plan in self.book.plans.items():
            at = self.book.position(task)
            key = view_key(task_plan, at.epoch, at.iteration)
            if (task not in self._readers_came and key in plan.views
                    and key not in self.board.ready):
                self.board.anticipate(key)
                self.anticipated[task] = key

    def reader_came(self, task: str) -> None:
        """The task's reader opened or waits for a view: its own demand counts from now on.
        The batch it was anticipated at stays demanded while another task still anticipates it
        or a reader waits for it: a search's trials share their batches, and a trial opening
        the batch another one was blocked on took that reader's demand away (its own read
        waits in the kernel for the pages the first reader's is filling, never asking us)."""
        self._readers_came.add(task)
        key = self.anticipated.pop(task, None)
        if key is not None and key not in self.anticipated.values():
            self.board.unanticipate(key)


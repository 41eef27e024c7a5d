"""A Hypothesis state machine against a real mount (in the style of JuiceFS's tests): random
sequences of stat, listdir, open, read (any offset and size, re-reads), getxattr, listxattr and
close, over valid, non-canonical and junk names, checked step by step against a model built
from the plan and the independent reference — never from the mount."""

from __future__ import annotations

import errno
import json
import os

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    rule,
    run_state_machine_as_test,
)

from tests.helpers.harness import mount_sandfs, task_config, write_config
from tests.helpers.plans import build_plan
from tests.helpers.reference import reference_view

EPOCHS = 2
BAD_NUMBERS = ["01", "+1", " 1", "1_0", "\u0661", "\uff11", "-1", "2", "999999999", "1e3"]
JUNK = ["nope", "view.npy", "..x", "%2F", "a" * 255, "\x01\x7f", "videos ", "VIEW"]


class Model:
    """The tree and the bytes sandfs must serve, from the plan and reference_view alone."""

    def __init__(self, plan) -> None:
        self.plan = plan
        self._views: dict[tuple[int, int], bytes] = {}

    def view_bytes(self, epoch: int, iteration: int) -> bytes:
        if (epoch, iteration) not in self._views:
            self._views[(epoch, iteration)] = reference_view(self.plan, epoch, iteration)
        return self._views[(epoch, iteration)]

    def lookup(self, parts: tuple[str, ...]):
        """("dir", names or None: not modelled) | ("view", epoch, iteration) | ("notdir",): a
        path through a view (the kernel says ENOTDIR) | None: ENOENT."""
        if len(parts) > 4 and self.lookup(parts[:4]) is not None and parts[3] == "view":
            return ("notdir",)
        plan = self.plan
        epochs = [str(e) for e in range(plan.epochs)]
        iterations = [str(i) for i in range(plan.iterations_per_epoch)]
        if parts == ():
            return ("dir", {".sand", "t0"})
        if parts == ("t0",):
            return ("dir", {*epochs, "videos"})
        if parts in ((".sand",), ("t0", "videos")):
            return ("dir", None)
        if len(parts) >= 2 and parts[0] == "t0" and parts[1] in epochs:
            if len(parts) == 2:
                return ("dir", set(iterations))
            if parts[2] in iterations:
                if len(parts) == 3:
                    return ("dir", {"view", "meta.json"})
                if parts[3:] == ("view",):
                    return ("view", int(parts[1]), int(parts[2]))
        return None


epoch_names = st.sampled_from([str(e) for e in range(EPOCHS)] + BAD_NUMBERS)
iteration_names = st.sampled_from(["0", "1", "2", *BAD_NUMBERS])
paths = st.one_of(
    st.just(()),
    st.tuples(st.sampled_from(["t0", ".sand", *JUNK])),
    st.tuples(st.just("t0"), epoch_names),
    st.tuples(st.just("t0"), epoch_names, iteration_names),
    st.tuples(st.just("t0"), epoch_names, iteration_names,
              st.sampled_from(["view", "view", "view", *JUNK])),
    st.tuples(st.just("t0"), st.just("0"), st.just("0"), st.just("view"), st.sampled_from(JUNK)),
)
VIEW_XATTRS = {"user.sand.meta", "user.sand.labels", "user.sand.state", "user.sand.readers"}
xattr_names = st.sampled_from([*sorted(VIEW_XATTRS), "user.sand.nope", "user.other",
                               "trusted.sand.meta"])


class MountMachine(RuleBasedStateMachine):
    mounted = None  # set by the test: one mount for every example
    model: Model = None

    handles = Bundle("handles")

    def __init__(self) -> None:
        super().__init__()
        self.open_fds: set[int] = set()  # closed at teardown: no descriptor outlives an example

    def path(self, parts):
        return self.mounted.path(*parts)

    def missing(self, expected, call, *args) -> bool:
        """Checks the errors of a path that is not there; True when it was such a path."""
        if expected is None or expected[0] == "notdir":
            error = FileNotFoundError if expected is None else NotADirectoryError
            with pytest.raises(error):
                call(*args)
            return True
        return False

    @rule(parts=paths)
    def stat(self, parts):
        expected = self.model.lookup(parts)
        if self.missing(expected, os.stat, self.path(parts)):
            return
        info = os.stat(self.path(parts))
        if expected[0] == "dir":
            assert os.path.isdir(self.path(parts))
        else:
            assert info.st_size == len(self.model.view_bytes(*expected[1:]))

    @rule(parts=paths)
    def listdir(self, parts):
        expected = self.model.lookup(parts)
        if self.missing(expected, os.listdir, self.path(parts)):
            return
        if expected[0] == "view":
            with pytest.raises(NotADirectoryError):
                os.listdir(self.path(parts))
        elif expected[1] is not None:
            assert set(os.listdir(self.path(parts))) == expected[1]

    @rule(target=handles, epoch=st.integers(0, EPOCHS - 1), iteration=st.integers(0, 2))
    def open(self, epoch, iteration):
        fd = os.open(self.path(("t0", str(epoch), str(iteration), "view")), os.O_RDONLY)
        self.open_fds.add(fd)
        return (fd, epoch, iteration)

    @rule(handle=handles, offset=st.integers(0, 70_000), size=st.integers(0, 1 << 20))
    def read(self, handle, offset, size):
        fd, epoch, iteration = handle
        expected = self.model.view_bytes(epoch, iteration)[offset:offset + size]
        assert os.pread(fd, size, offset) == expected

    @rule(handle=consumes(handles))
    def close(self, handle):
        self.open_fds.remove(handle[0])
        os.close(handle[0])

    @rule(parts=paths, name=xattr_names)
    def getxattr(self, parts, name):
        expected = self.model.lookup(parts)
        if self.missing(expected, os.getxattr, self.path(parts), name):
            return
        if expected[0] != "view" or name not in VIEW_XATTRS:
            with pytest.raises(OSError) as caught:
                os.getxattr(self.path(parts), name)
            assert caught.value.errno in (errno.ENODATA, errno.EOPNOTSUPP), caught.value
            return
        value = os.getxattr(self.path(parts), name)
        _, epoch, iteration = expected
        plan = self.model.plan
        view_meta = plan.view_meta(plan.view_plan(epoch, iteration))
        if name == "user.sand.meta":
            assert json.loads(value) == json.loads(json.dumps(view_meta))
        elif name == "user.sand.labels":
            assert json.loads(value) == [s["label"] for s in view_meta["samples"]]
        elif name == "user.sand.readers":
            assert value == b"1"  # one task on the mount
        else:
            assert value in (b"planned", b"materializing", b"ready")

    @rule(parts=paths)
    def listxattr(self, parts):
        expected = self.model.lookup(parts)
        if self.missing(expected, os.listxattr, self.path(parts)):
            return
        if expected[0] == "view":
            assert set(os.listxattr(self.path(parts))) == VIEW_XATTRS
        elif parts == ("t0",):  # a task's directory: its class names
            assert os.listxattr(self.path(parts)) == ["user.sand.classes"]
        else:
            assert os.listxattr(self.path(parts)) == []

    def teardown(self):
        for fd in self.open_fds:
            os.close(fd)


@pytest.mark.parametrize(("examples", "steps"), [
    (200, 50),  # the default tier; the stress tier runs ten times as many
    pytest.param(2000, 200, marks=pytest.mark.stress),
])
def test_random_operation_sequences_match_the_model(tmp_path, dataset_dir, examples, steps):
    config = write_config(tmp_path / "t0.yaml", task_config(dataset_dir, epochs=EPOCHS))
    with mount_sandfs(tmp_path, [config]) as mounted:
        MountMachine.mounted = mounted
        MountMachine.model = Model(build_plan(config))
        run_state_machine_as_test(MountMachine, settings=settings(
            max_examples=examples, stateful_step_count=steps, deadline=None,
            suppress_health_check=list(HealthCheck)))
        assert os.listdir(f"/proc/{mounted.process.pid}/fd")  # the daemon is alive and well

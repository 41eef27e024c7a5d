"""pyfuse3 Operations over the namespace. Every handler answers through `handler` (only
FUSEError; sandfs/fuse/handlers.py); the inode table raises ENOENT for an unknown inode.

Until the datasets are scanned (sandfs/startup.py), a lookup, opendir, create or unlink that
needs the tasks, and a getxattr on a task's directory, wait for them (sandfs/fuse/gate.py); the
other handlers work on inodes, which only `.sand`, its files and the configs' task directories
have by then.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import stat
import time
from dataclasses import dataclass, field

import pyfuse3
import trio

from sandfs.access import NodeAccess, privileged
from sandfs.bounds import LimitReached, Quota
from sandfs.config.limits import DEFAULT_LIMITS, Limits
from sandfs.config.loader import ConfigError
from sandfs.errors import UserError
from sandfs.faults import fault_point
from sandfs.fuse.gate import Gate
from sandfs.fuse.handlers import fuse_error, handler, read_only
from sandfs.fuse.inodes import Inodes
from sandfs.fuse.kernelcache import attr_timeout, entry_timeout, is_immutable
from sandfs.fuse.namespace import Namespace, Node, Viewer, meta_bytes
from sandfs.fuse.pagecache import PageDropper
from sandfs.fuse.readahead import set_readahead
from sandfs.fuse.xattrs import PlannedValues, xattr_bytes, xattr_names
from sandfs.metrics import render_metrics
from sandfs.openat import pread_file
from sandfs.sched.flights import ObjectFailed
from sandfs.service import ViewService
from sandfs.startup import Startup
from sandfs.threads import limiter

log = logging.getLogger(__name__)

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_TRUNC
MAX_LOOKUPS_KEPT = 4096  # threads whose last view lookup is remembered
TASK_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,254}")


@dataclass
class Upload:
    """A task YAML being written to .sand/tasks: its bytes, and its writer's (uid, gid)."""

    writer: tuple[int, int]
    data: bytearray = field(default_factory=bytearray)


@dataclass
class OpenFile:
    node: Node
    inode: int
    uid: int  # of the process that opened it: its handles count against its limit
    data: bytes | memoryview | None = None  # at the first read (views), or at open (small files)
    registered: bool = False  # a task upload that was handed to the service
    lock: trio.Lock = field(default_factory=trio.Lock)


class SandOperations(pyfuse3.Operations):
    supports_dot_lookup = False
    enable_writeback_cache = False
    enable_acl = False

    def __init__(self, service: ViewService | Startup, mountpoint: str | None = None,
                 limits: Limits = DEFAULT_LIMITS) -> None:
        super().__init__()
        self.pages = PageDropper()  # started and closed by whoever owns the FUSE session
        self.namespace = Namespace(service)
        self.startup = self.namespace.startup
        self.gate = Gate(self.namespace)
        self.inodes = Inodes(self.namespace.identity)
        self.mountpoint = mountpoint  # to set its readahead once it serves; None: leave it
        self.planned = PlannedValues()  # views' meta and labels, asked twice each
        self.looked_up: dict[int, Node] = {}  # thread id -> the view path it looked up last
        self.files: dict[int, OpenFile] = {}
        self.dirs: dict[int, tuple[int, Viewer]] = {}  # open directories: inode, who opened
        self.uploads: dict[Node, Upload] = {}  # task YAMLs being written to .sand/tasks
        self.leases: dict[Node, int] = {}  # open handles on .sand/tasks/NAME.lease
        self.limits = limits
        self.handles = Quota("open handles", limits.handles_per_uid, limits.handles_total,
                             per_uid_errno=errno.EMFILE, total_errno=errno.ENFILE,
                             setting="handles")
        self.upload_slots = Quota("task files being written", limits.uploads_per_uid,
                                  limits.uploads_total, setting="uploads")
        self._next_fh = 1
        self._next_upload = 1
        self.mounted_ns = time.time_ns()

    @property
    def service(self) -> ViewService:
        return self.namespace.service

    # -- attributes --------------------------------------------------------------------------

    def attributes(self, node: Node) -> pyfuse3.EntryAttributes:
        attr = pyfuse3.EntryAttributes()
        attr.st_ino = self.inodes.inode(node)
        access = self.namespace.access(node)
        if node.is_dir:
            attr.st_mode = stat.S_IFDIR | access.mode
            attr.st_nlink = 2
        elif node.kind == "task_upload":
            upload = self.uploads.get(node, Upload(self.namespace.daemon))
            attr.st_mode = stat.S_IFREG | 0o600
            attr.st_nlink = 1
            attr.st_size = len(upload.data)
            access = NodeAccess(*upload.writer, 0o600)
        else:
            attr.st_mode = stat.S_IFREG | access.mode
            attr.st_nlink = 1
            attr.st_size = self.namespace.file_size(node)
        attr.st_uid, attr.st_gid = access.uid, access.gid
        attr.st_blksize = 1 << 20
        attr.st_blocks = (attr.st_size + 511) // 512
        attr.st_atime_ns = attr.st_mtime_ns = attr.st_ctime_ns = self.mounted_ns
        serving = node.kind == "task" and self.startup.ready and self.namespace.exists(node)
        attr.attr_timeout = attr_timeout(node, serving)
        attr.entry_timeout = entry_timeout(node)
        return attr

    def node_for(self, inode: int, ctx=None) -> Node:
        """The node an inode stands for in this request. For a view that several tasks share,
        the path the calling thread looked up last (open and getxattr walk the path, and views'
        names are never cached, so the kernel looks the name up right before), else any of its
        paths whose task is still registered."""
        aliases = self.inodes.aliases(inode)
        if len(aliases) == 1:
            return aliases[0]
        looked_up = self.looked_up.get(ctx.pid) if ctx is not None else None
        if looked_up in aliases and self.namespace.exists(looked_up):
            return looked_up
        return next((n for n in aliases if self.namespace.exists(n)), aliases[0])

    def remember_lookup(self, node: Node, ctx) -> None:
        if node.kind != "view" or ctx is None:
            return
        self.looked_up.pop(ctx.pid, None)
        self.looked_up[ctx.pid] = node
        if len(self.looked_up) > MAX_LOOKUPS_KEPT:
            del self.looked_up[next(iter(self.looked_up))]

    @handler
    async def lookup(self, parent_inode, name, ctx=None):
        if self.mountpoint is not None:  # the first request after FUSE init: tune once
            set_readahead(self.mountpoint)
            self.mountpoint = None
        parent = self.inodes.node(parent_inode)
        await self.gate.lookup(parent, os.fsdecode(name), ctx)
        parent = await self.namespace.prepared(parent)
        node = self.namespace.child(parent, os.fsdecode(name))
        if node is None:
            raise fuse_error(errno.ENOENT)
        self.remember_lookup(node, ctx)
        attr = self.attributes(node)
        self.inodes.held(attr.st_ino)
        return attr

    async def forget(self, inode_list):
        for inode, count in inode_list:
            self.inodes.forget(inode, count)

    @handler
    async def getattr(self, inode, ctx=None):
        node = await self.namespace.prepared(self.node_for(inode, ctx))
        if not self.namespace.exists(node):
            raise fuse_error(errno.ENOENT)
        return self.attributes(node)

    # -- directories -------------------------------------------------------------------------

    @handler
    async def opendir(self, inode, ctx):
        node = self.inodes.node(inode)
        if not node.is_dir:
            raise fuse_error(errno.ENOTDIR)
        await self.gate.lookup(node, None, ctx)  # its readdir then answers at once
        fh = self._next_fh
        self._next_fh += 1
        self.dirs[fh] = (inode, Viewer(ctx.uid, ctx.gid))  # / and .sand/tasks list per user
        return fh

    @handler
    async def readdir(self, fh, start_id, token):
        inode, viewer = self.dirs.get(fh, (fh, None))
        node = await self.namespace.prepared(self.inodes.node(inode))
        for position, name, child in self.namespace.children(node, start_id, viewer):
            attr = self.attributes(child)
            if not pyfuse3.readdir_reply(token, os.fsencode(name), attr, position):
                self.inodes.drop_unheld(attr.st_ino)  # the page is full: not sent
                break
            self.inodes.held(attr.st_ino)  # readdirplus: the kernel counts it as a lookup

    async def releasedir(self, fh):
        self.dirs.pop(fh, None)

    # -- files -------------------------------------------------------------------------------

    @handler
    async def open(self, inode, flags, ctx):
        node = self.node_for(inode, ctx)
        if node.is_dir:
            raise fuse_error(errno.EISDIR)
        if flags & WRITE_FLAGS:
            raise fuse_error(errno.EROFS)
        if node.kind in ("video_file", "aug") and \
                not self.service.registry.may_read(node.task, node.video):
            raise fuse_error(errno.EACCES)  # its owner lost access to the video since
        if node.kind == "task_lease" and not self.may_end(node.task, ctx.uid):
            raise fuse_error(errno.EACCES)  # closing it would end another user's task
        self.take_handle(node, ctx.uid)
        try:
            info = await self.open_handle(node, ctx.uid)
        except BaseException:
            self.handles.give(ctx.uid)
            raise
        fh = self._next_fh
        self._next_fh += 1
        self.files[fh] = OpenFile(node, inode, ctx.uid)
        if node.kind in ("status", "metrics", "task_yaml", "meta"):
            self.files[fh].data = self.small_file(node, ctx.uid)
        info.fh = fh
        return info

    def take_handle(self, node: Node, uid: int) -> None:
        """Count a handle of `uid`: EMFILE past its limit, ENFILE past the mount's (with a
        status.json failure on the task, once per distinct path)."""
        try:
            self.handles.take(uid)
        except LimitReached as exc:
            if node.task:
                self.service.failures.record(node.task, self.namespace.task_path(node)
                                             if node.kind in ("view", "video_file", "aug")
                                             else node.kind, str(exc))
            raise fuse_error(exc.errno) from exc

    async def open_handle(self, node: Node, uid: int) -> pyfuse3.FileInfo:
        info = pyfuse3.FileInfo()
        info.keep_cache = is_immutable(node)
        if node.kind == "view":
            self.service.opened_view(node.task, node.epoch, node.iteration)
        elif node.kind == "video_file":
            await self.read_source(node, 0, 0)  # EIO now for a changed file, not at the read
        elif node.kind == "task_lease":
            self.take_lease(node)
        elif node.kind in ("status", "metrics"):
            info.direct_io = True  # its size changes between getattr and read
        return info

    async def read_source(self, node: Node, offset: int, size: int) -> bytes:
        """Bytes of a source video, opened for this read only: a handle holds no fd of the
        daemon's, so no number of open handles can exhaust them."""
        info = self.service.tasks[node.task].listed[node.video]
        try:
            st, data = await trio.to_thread.run_sync(pread_file, info.path, offset, size,
                                                     limiter=limiter("source_reads"))
        except OSError as error:  # gone, or no regular file in its place now
            self.failed(node, f"source_unreadable: {error.strerror}")
            raise fuse_error(errno.EIO) from None
        # its size and frames were planned from the file as scanned: passing a changed one
        # through would cut it (and another file in its place is not the task owner's)
        changed = info.changed(st)
        if changed:
            self.failed(node, f"source_changed: {changed}")
            raise fuse_error(errno.EIO)
        return data

    def may_end(self, task: str, uid: int) -> bool:
        """Its owner, root and the daemon's user may end a task (unlink, or its lease)."""
        owner = self.service.registry.owners.get(task)
        return privileged(uid) or (owner is not None and owner.uid == uid)

    def failed(self, node: Node, reason: str) -> None:
        where = self.namespace.task_path(node)
        log.warning("task %s: %s failed: %s", node.task, where, reason)
        self.service.failures.record(node.task, where, reason)

    def small_file(self, node: Node, viewer: int) -> bytes:
        if node.kind in ("status", "metrics"):  # each user sees their own tasks only
            record = self.startup.status_for(None if privileged(viewer) else viewer)
            return record.to_bytes() if node.kind == "status" else render_metrics(record)
        if node.kind == "meta":
            return meta_bytes(self.service, node)
        return self.service.task_texts[node.task].encode()

    @handler
    async def read(self, fh, off, size):
        handle = self.files.get(fh)
        if handle is None:
            raise fuse_error(errno.EBADF)
        try:
            fault_point("serving_read", handle.node.task)
        except Exception as exc:  # for this task's status.json too, not only the log
            self.failed(handle.node, f"{type(exc).__name__}: {exc}")
            raise
        if handle.node.kind == "video_file":
            return await self.read_source(handle.node, off, size)
        if handle.data is None:
            async with handle.lock:
                if handle.data is None:
                    try:
                        handle.data = await self.materialize(handle.node)
                    except ObjectFailed as exc:
                        self.failed(handle.node, str(exc))
                        raise
        return memoryview(handle.data)[off : off + size]

    async def materialize(self, node: Node) -> bytes | memoryview:
        service = self.service
        if node.kind == "view":
            return await service.read_view(node.task, node.epoch, node.iteration)
        await self.namespace.prepared(node)
        fplan = service.frame_plan(node.task, node.video, node.frame, node.depth)
        if fplan is None:  # the task moved on to another epoch since lookup
            raise fuse_error(errno.ENOENT)
        return await service.read_frame(node.task, node.video, node.frame, fplan)

    async def release(self, fh):
        handle = self.files.pop(fh, None)
        if handle is None:
            return
        self.handles.give(handle.uid)
        node = handle.node
        if node.kind == "view" and self.namespace.exists(node):
            if handle.data is None:  # nothing came through this handle: the page cache served it
                self.service.view_read_from_page_cache(node.task, node.epoch, node.iteration)
            if self.service.released_view(node.task, node.epoch, node.iteration):
                self.pages.drop(handle.inode)  # every reader has it: the kernel's copy serves none
        if node.kind == "task_upload" and self.uploads.pop(node, None) is not None:
            self.upload_slots.give(handle.uid)
        if node.kind == "task_lease":
            await self.drop_lease(node)

    # -- leases: a task held open by its registrar ends when the last handle closes ----------

    def take_lease(self, node: Node) -> None:
        if not self.namespace.exists(node):  # a stale inode of an ended task
            raise fuse_error(errno.ENOENT)
        self.leases[node] = self.leases.get(node, 0) + 1

    async def drop_lease(self, node: Node) -> None:
        """The kernel sends RELEASE once the last descriptor sharing a handle is closed, also
        when its process exits or is killed: the task ends with the registrar that held it."""
        held = self.leases.pop(node) - 1
        if held:
            self.leases[node] = held
            return
        if not self.namespace.exists(node):  # ended (or registered anew) meanwhile
            return
        try:
            await self.service.remove_task(node.task)
        except Exception:  # release has nobody to answer: log, never raise
            log.exception("ending task %s when its lease was released", node.task)

    # -- registering and ending tasks through .sand/tasks/ -----------------------------------

    @handler
    async def create(self, parent_inode, name, mode, flags, ctx):
        parent = self.inodes.node(parent_inode)
        file_name = os.fsdecode(name)
        if parent.kind != "tasks":
            raise fuse_error(errno.EROFS)
        await self.gate.lookup(parent, file_name, ctx)
        task = file_name.removesuffix(".yaml")
        if not file_name.endswith(".yaml") or not TASK_NAME.fullmatch(task):
            raise fuse_error(errno.EINVAL)
        if task in self.service.tasks:
            raise fuse_error(errno.EEXIST)
        node = Node("task_upload", task=task, generation=self._next_upload)
        self.take_upload(task, ctx.uid)
        try:
            self.take_handle(node, ctx.uid)
        except BaseException:
            self.upload_slots.give(ctx.uid)
            raise
        self._next_upload += 1
        self.uploads[node] = Upload((ctx.uid, ctx.gid))
        attr = self.attributes(node)
        fh = self._next_fh
        self._next_fh += 1
        self.files[fh] = OpenFile(node, attr.st_ino, ctx.uid)
        info = pyfuse3.FileInfo()
        info.fh = fh
        info.direct_io = True
        self.inodes.held(attr.st_ino)
        return info, attr

    def take_upload(self, task: str, uid: int) -> None:
        """EDQUOT past the uploads `uid` may write at once, ENOSPC past the mount's (the
        reason in status.json's task_errors)."""
        try:
            self.upload_slots.take(uid)
        except LimitReached as exc:
            self.service.registry.refused(task, str(exc), uid)
            raise fuse_error(exc.errno) from exc

    @handler
    async def write(self, fh, off, buf):
        handle = self.files.get(fh)
        if handle is None or handle.node.kind != "task_upload" or handle.registered:
            raise fuse_error(errno.EROFS)
        data = self.uploads[handle.node].data
        if off + len(buf) > self.limits.upload_bytes:
            raise fuse_error(errno.EFBIG)
        data[len(data):] = bytes(max(0, off - len(data)))
        data[off : off + len(buf)] = buf
        return len(buf)

    @handler
    async def flush(self, fh):
        """Closing a task YAML written to .sand/tasks registers the task; an error goes back to
        the writer's close() (and into status.json's task_errors)."""
        handle = self.files.get(fh)
        if handle is None or handle.node.kind != "task_upload" or handle.registered:
            return
        handle.registered = True
        file_name = f"{handle.node.task}.yaml"
        upload = self.uploads[handle.node]
        try:
            text = bytes(upload.data).decode("utf-8")
            await self.service.add_task_file(file_name, text, upload.writer)
        except (LimitReached, ConfigError, UserError, UnicodeDecodeError) as exc:
            self.service.registry.refused(handle.node.task, str(exc), upload.writer[0])
            log.warning("task file %s refused: %s", file_name, exc)
            raise fuse_error(exc.errno if isinstance(exc, LimitReached) else errno.EINVAL) from exc

    @handler
    async def unlink(self, parent_inode, name, ctx):
        parent = self.inodes.node(parent_inode)
        if parent.kind != "tasks":
            raise fuse_error(errno.EROFS)
        await self.gate.lookup(parent, os.fsdecode(name), ctx)
        task = os.fsdecode(name).removesuffix(".yaml")
        if not os.fsdecode(name).endswith(".yaml") or task not in self.service.tasks:
            raise fuse_error(errno.ENOENT)
        if not self.may_end(task, ctx.uid):
            raise fuse_error(errno.EPERM)  # the sticky bit's rule, kept by the daemon too
        await self.service.remove_task(task)

    # -- extended attributes -----------------------------------------------------------------

    @handler
    async def listxattr(self, inode, ctx):
        return xattr_names(self.node_for(inode, ctx))

    @handler
    async def getxattr(self, inode, name, ctx):
        node = self.node_for(inode, ctx)
        await self.gate.contents(node, ctx)
        node = await self.namespace.prepared(node)
        value = None if not node.task else (  # the root and .sand carry none
            xattr_bytes(self.service, node, name, self.namespace.exists(node), self.planned))
        if value is None:
            raise fuse_error(pyfuse3.ENOATTR)
        return value

    # -- everything that writes is refused ---------------------------------------------------

    setxattr = read_only
    removexattr = read_only
    mknod = read_only
    mkdir = read_only
    rmdir = read_only
    symlink = read_only
    rename = read_only
    link = read_only

    @handler
    async def setattr(self, inode, attr, fields, fh, ctx):
        node = self.inodes.node(inode)
        if node.kind != "task_upload":  # cp and shells may set times on the file they wrote
            raise fuse_error(errno.EROFS)
        if fields.update_size:
            del self.uploads[node].data[attr.st_size :]
        return self.attributes(node)

    async def statfs(self, ctx):
        stat_ = pyfuse3.StatvfsData()
        stat_.f_bsize = stat_.f_frsize = 1 << 20
        stat_.f_namemax = 255
        return stat_

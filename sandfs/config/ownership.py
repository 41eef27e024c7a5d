"""The `access:` section of a task config: `owner` (user name or uid), `group` (group name or
gid), `mode` (octal string, read bits only). Names are looked up once, at load."""

from __future__ import annotations

import grp
import pwd
import re

from sandfs.config import fields
from sandfs.config.schema import AccessConfig
from sandfs.config.yamlsafe import Value

ACCESS_KEYS = ("owner", "group", "mode")
MAX_ID = (1 << 32) - 2  # (uid_t)-1 means "unchanged" to the kernel
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*\$?")
_MODE_RE = re.compile(r"(0o?)?[0-7]{3}")


def read_access_section(value: Value | None) -> AccessConfig:
    if value is None or value.data is None:
        return AccessConfig()
    entries = fields.mapping(value, ACCESS_KEYS)
    owner, group, mode = (entries.get(key) for key in ACCESS_KEYS)
    return AccessConfig(
        owner=None if owner is None else _database_id(owner, "user"),
        group=None if group is None else _database_id(group, "group"),
        mode=None if mode is None else _mode(mode),
    )


def _database_id(value: Value, what: str) -> int:
    """A uid or gid, given as a number or as a name the user/group database knows."""
    if isinstance(value.data, int) and not isinstance(value.data, bool):
        return fields.integer(value, minimum=0, maximum=MAX_ID)
    name = fields.string(value, pattern=_NAME_RE, what=f"a {what} name or number")
    try:
        return pwd.getpwnam(name).pw_uid if what == "user" else grp.getgrnam(name).gr_gid
    except KeyError:
        raise value.error(f"unknown {what} {name!r}") from None


def _mode(value: Value) -> int:
    if isinstance(value.data, int) and not isinstance(value.data, bool):
        raise value.error(f"expected an octal mode as a string like '0440', got the integer "
                          f"{value.data} (write it in quotes: '0{value.data}')")
    text = fields.string(value, pattern=_MODE_RE, what="an octal mode like '0440'")
    mode = int(text.removeprefix("0o"), 8)
    if mode & ~0o444 or not mode & 0o400:
        raise value.error(f"mode {text}: only read bits are allowed (the tree is read-only), "
                          f"the owner's included: e.g. '0400', '0440' or '0444'")
    return mode

"""Files that hold a secret (a key, a password, a login) and that only their owner may
read: created 0600, never readable for a moment in between, and put back to 0600 when
they already existed."""

from __future__ import annotations

import os
import pwd
from pathlib import Path


def write_private(path: Path, data: str | bytes, owner: str | None = None) -> Path:
    """``data`` in ``path``, readable by its owner only (the OS user ``owner`` if
    given, e.g. the Postgres server's); returns ``path``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data.encode() if isinstance(data, str) else data)
    os.chmod(path, 0o600)
    if owner is not None:
        user = pwd.getpwnam(owner)
        os.chown(path, user.pw_uid, user.pw_gid)
    return path

"""The writer locks of SQLite stores: one writer per database file, whatever name reaches it.

A store is its database *file*, not the name it was given: a symlink to the file or to a
directory above it, or a second hard link, reaches the same file, and deleting a lock file
beside it changes nothing about who writes it. So:

* **The writer lock is an ``flock`` on the database file itself** (:class:`StoreLock`), taken
  through the resolved path (``os.path.realpath``). Every name of the file reaches the same
  lock, the kernel drops it when the holder dies, and no other file's deletion can release
  it. ``flock`` locks are separate from the POSIX record locks SQLite takes on the same file
  (on Linux, local file systems), so readers and SQLite's own locking are untouched.
* **A database file with more than one hard link is refused**, by writers and readers
  alike (:func:`check_location`): SQLite keeps its write-ahead log beside the *name* it
  opened, so a connection through another name reads the file without the log's committed
  pages, and a writer through it would corrupt the file.
* **The file is opened by its resolved path**, so SQLite's ``-wal``/``-shm`` files are the
  ones beside the real file whatever name the caller used.
* **Creation takes a second lock** (:class:`PathLock`, an ``flock`` on ``<real path>.lock``)
  while it fits and writes the new file, because before the rename there is no database file
  to lock; the new file is locked before it gets the store's name (:mod:`.create`).

Within one process the held locks are also kept in a table (by device and inode), so a
second writer in the same process is refused without opening the file: closing any
descriptor of a file drops every POSIX lock this process holds on it, SQLite's included.

A new store file is created mode 0600 (:func:`create_private`), so SQLite gives its
``-wal``, ``-shm`` and ``-journal`` the same mode; opening a store whose files other users may
read warns once per open, saying ``chmod 600`` (:func:`warn_if_shared`). A busy store's holder
is named by pid and program name only, never its arguments (a command line may hold a DSN's
password or a token).

Locations that cannot be a store as given — a directory, a read-only file system or a file
without write permission for a writer, a hard-linked file — raise :class:`StoreUnusable`
with one line saying what to change (retrying would not help).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
import threading
import warnings
from pathlib import Path

from .errors import StoreBusy, StoreError, StoreUnusable


def resolved(path: str | os.PathLike) -> Path:
    """The real path of a store file: symlinks (of the file and of every directory above
    it) resolved, so every name of the file gives the same path and the same ``-wal``."""
    return Path(os.path.realpath(path))


def check_location(
    given: str | os.PathLike, real: Path, *, allow_links: bool = False
) -> os.stat_result | None:
    """Refuse what cannot be a store file (a directory or another non-regular file, a file
    with several hard links unless ``allow_links``); returns its status, or None when
    nothing is there yet."""
    try:
        st = os.stat(real)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise os_error(str(given), err, "opening the store") from err
    if os.path.isdir(real):
        raise StoreUnusable(
            f"{given} is a directory, not a store file; give the path of the store's "
            "database file (e.g. model.db)"
        )
    if not stat.S_ISREG(st.st_mode):
        raise StoreUnusable(
            f"{given} is not a regular file (a device, pipe or socket), so it cannot be a "
            "store; give the path of the store's database file"
        )
    if st.st_nlink > 1 and not allow_links:
        raise _linked(given, st.st_nlink)
    return st


def _linked(given: str | os.PathLike, links: int) -> StoreUnusable:
    return StoreUnusable(
        f"{given}: the database file has {links} hard links; SQLite keeps its write-ahead "
        "log beside the name it opened, so another name would read or write the store "
        "without it: remove the other links (`find / -samefile` lists them) or use a copy"
    )


def os_error(location: str, err: OSError, doing: str) -> StoreError:
    """An OS error about a store's file as the store error a caller can act on."""
    text = " ".join(str(err).split()) or type(err).__name__
    if err.errno == errno.EROFS:
        return StoreUnusable(
            f"{location}: the file system is read-only, so the store can only be opened "
            "read-only (inspect, verify, predict); copy it to a writable place to change it"
        )
    if err.errno in (errno.EACCES, errno.EPERM):
        return StoreUnusable(
            f"{location}: {doing} was not permitted ({text}); a writer needs write access "
            "to the store file and its directory, a reader can open it read-only"
        )
    if err.errno == errno.EISDIR:
        return StoreUnusable(
            f"{location} is a directory, not a store file; give the path of the store's "
            "database file (e.g. model.db)"
        )
    if err.errno == errno.ENOSPC:
        return StoreError(
            f"{location}: {doing} failed, the disk is full ({text}); nothing was "
            "acknowledged, free space and retry"
        )
    return StoreError(f"{location}: {doing} failed ({text}); nothing was acknowledged, retry")


def program(pid: int) -> str:
    """The program name of process ``pid`` (Linux's ``/proc/<pid>/comm``: the executable's or
    script's name, no arguments), or "" when unknown."""
    try:
        name = Path(f"/proc/{pid}/comm").read_bytes().decode(errors="replace")
    except OSError:
        name = Path(sys.argv[0]).name if pid == os.getpid() and sys.argv else ""
    return "".join(c for c in name.strip() if c.isprintable() and not c.isspace())[:40]


def _me() -> str:
    return f"pid {os.getpid()}: {program(os.getpid())}"


def create_private(given: str | os.PathLike, real: Path) -> None:
    """Create the new, empty database file ``real`` with mode 0600 (the umask may only
    narrow it) before SQLite opens it: SQLite would create it 0644, readable by every local
    user, and gives the ``-wal``, ``-shm`` and ``-journal`` files it makes beside it the
    database file's mode."""
    try:
        fd = os.open(real, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return  # made meanwhile by whoever holds the creators' lock: theirs to mode
    except OSError as err:
        raise os_error(str(given), err, "creating the store") from err
    os.close(fd)


SHARED_MODE_BITS = 0o077
"""Permission bits that let users other than the owner at a store's file."""


def warn_if_shared(given: str | os.PathLike, real: Path, st: os.stat_result) -> None:
    """Warn (a UserWarning, once per open) when the store file or its ``-wal``/``-shm``
    may be read or written by other users: they hold every row and, with ``store_key=True``,
    the secret key."""
    shared = []
    for path, found in ((real, st), *((Path(f"{real}{s}"), None) for s in ("-wal", "-shm"))):
        try:
            mode = (found or os.stat(path)).st_mode
        except OSError:
            continue
        if mode & SHARED_MODE_BITS:
            shared.append((path, stat.S_IMODE(mode)))
    if shared:
        modes = ", ".join(f"{p.name} {m:04o}" for p, m in shared)
        names = " ".join(str(p) for p, _ in shared)
        warnings.warn(
            f"{given}: other users may read or change the store's files ({modes}), which "
            f"hold every row and may hold the secret key; run `chmod 600 {names}`",
            UserWarning,
            stacklevel=_outside_the_store(),
        )


def _outside_the_store() -> int:
    """The ``stacklevel`` of the first caller outside this package (the user's open)."""
    here = os.path.dirname(__file__)
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.dirname(frame.f_code.co_filename) == here:
        frame, level = frame.f_back, level + 1
    return level


def _flock_holder(st: os.stat_result) -> str:
    """Who holds an ``flock`` on the file ``st`` describes, from Linux's ``/proc/locks``
    (pid and program name), or "unknown process"."""
    device = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    pids = []
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 4242 fe:00:1234 0 EOF" (a waiter's line has "->")
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[3] == "WRITE":
            where = fields[5]
            if where == device or where.rpartition(":")[2] == str(st.st_ino):
                with contextlib.suppress(ValueError):
                    pids.append((where != device, int(fields[4])))
    if not pids:
        return "unknown process"
    pid = min(pids)[1]  # an exact device match first
    name = program(pid)
    return f"pid {pid}: {name}" if name else f"pid {pid}"


def _busy(given: str | os.PathLike, holder: str) -> StoreBusy:
    return StoreBusy(
        f"{given} is in use by another writer ({holder}); stop it, or open read-only for "
        "inspect/verify"
    )


class StoreLock:
    """The writer lock of one SQLite store: an exclusive ``flock`` on its database file,
    held (with the descriptor) until :meth:`release` or the process's death."""

    _held: dict[tuple[int, int], StoreLock] = {}
    """The locks this process holds, by (device, inode)."""
    _guard = threading.Lock()

    def __init__(self, given: str | os.PathLike, *, replacing: bool = False) -> None:
        """Lock the file ``given`` names (resolved); StoreBusy if another writer holds it,
        StoreUnusable if it cannot be a store file. ``replacing``: a file about to be
        replaced by a new one (``create(..., overwrite=True)``), which may have other names
        and need not be writable."""
        self.given = str(given)
        self.path = resolved(given)
        self._fd = -1
        st = check_location(given, self.path, allow_links=replacing)
        if st is None:
            raise FileNotFoundError(f"no store at {given}; create one with `forgetting fit`")
        with self._guard:
            if (st.st_dev, st.st_ino) in self._held:
                raise _busy(given, f"this process, {_me()}")
            self._fd = self._open_and_lock(st, replacing)
            self.key = (st.st_dev, st.st_ino)
            self._held[self.key] = self

    def _open_and_lock(self, st: os.stat_result, replacing: bool) -> int:
        import fcntl

        try:  # a writer's: a read-only file system or file is refused here, clearly
            fd = os.open(self.path, os.O_RDONLY if replacing else os.O_RDWR)
        except OSError as err:
            raise os_error(self.given, err, "opening the store for writing") from err
        try:
            found = os.fstat(fd)
            if (found.st_dev, found.st_ino) != (st.st_dev, st.st_ino):
                raise StoreBusy(f"{self.given} was replaced while it was being opened; retry")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise _busy(self.given, _flock_holder(found)) from None
            except OSError as err:
                raise os_error(self.given, err, "taking the writer lock") from err
            links = os.fstat(fd).st_nlink  # a link made since the check: still refused
            if links > 1 and not replacing:
                raise _linked(self.given, links)
        except BaseException:
            # Only reached when this process holds no writer lock on the file (the table
            # above), so closing drops no lock of a writer of ours; a read-only connection
            # of this process to the file keeps its snapshot (WAL read marks live in -shm).
            os.close(fd)
            raise
        return fd

    def renamed(self, given: str | os.PathLike) -> None:
        """The locked file now has the store's name (a new store renamed into place)."""
        self.given = str(given)
        self.path = resolved(given)

    def still_named(self) -> None:
        """Check that the resolved path still names the locked file (StoreBusy if another
        file was renamed into place meanwhile)."""
        try:
            st = os.stat(self.path)
        except OSError as err:
            raise os_error(self.given, err, "opening the store") from err
        if (st.st_dev, st.st_ino) != self.key:
            raise StoreBusy(f"{self.given} was replaced while it was being opened; retry")

    def release(self) -> None:
        """Drop the lock. Called after this process's connections to the file are closed:
        closing the descriptor also drops this process's POSIX locks on the file."""
        with self._guard:
            if self._fd < 0:
                return
            if self._held.get(self.key) is self:
                del self._held[self.key]
            os.close(self._fd)
            self._fd = -1


class PathLock:
    """An exclusive ``flock`` on ``<real path>.lock``: serializes the creators of a store at
    one path while no database file exists there to lock (:mod:`.create`). The holder writes
    its pid and program name into the file for the next creator's error message."""

    def __init__(self, given: str | os.PathLike) -> None:
        import fcntl

        real = resolved(given)
        self.path = real.with_name(real.name + ".lock")
        try:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as err:
            raise os_error(str(given), err, "taking the writer lock") from err
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = self._holder()
            os.close(self._fd)
            raise _busy(given, holder) from None
        except OSError as err:
            os.close(self._fd)
            raise os_error(str(given), err, "taking the writer lock") from err
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, _me().encode(errors="replace"), 0)

    def _holder(self) -> str:
        """The holder as its file names it: "pid N: program" (a release that wrote its
        whole command line there is shown by pid and program alone too)."""
        try:
            text = os.pread(self._fd, 300, 0).decode(errors="replace")
        except OSError:
            text = ""
        pid, _, command = text.partition(":")
        if not pid.startswith("pid ") or not pid[4:].isdigit():
            return "unknown process"
        words = command.split()
        return f"{pid}: {Path(words[0]).name}" if words else pid

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = -1

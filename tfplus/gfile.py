"""tf.gfile (TF1): file operations on local paths, with TF1's names and errors (tf.errors.NotFoundError for a
missing path).

    import tfplus as tf
    if not tf.gfile.Exists(logdir):
        tf.gfile.MakeDirs(logdir)
    with tf.gfile.GFile(path, "w") as f:
        f.write("hello")
"""
from __future__ import annotations

import contextlib
import glob as _glob
import os
import re
import shutil
import stat
import uuid
from typing import NamedTuple

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

from tfplus import errors

__all__ = ["GFile", "Open", "FastGFile", "Exists", "MakeDirs", "MkDir", "Glob", "ListDirectory", "IsDirectory",
           "Remove", "Rename", "Copy", "DeleteRecursively", "Walk", "Stat", "open_regular", "read_regular"]


def _not_found(path, what: str):
    return errors.NotFoundError(None, None, f"{what}: {path}: no such file or directory")


class GFile:
    """An open file (text or binary by mode, like open()); also a context manager and an iterator of lines."""

    def __init__(self, name, mode: str = "r"):
        self.name, self.mode = os.fspath(name), mode
        try:
            self._f = open(self.name, mode, **({} if "b" in mode else {"encoding": "utf-8"}))
        except FileNotFoundError:
            raise _not_found(self.name, "GFile") from None

    def read(self, n: int = -1):
        return self._f.read(n)

    def readline(self):
        return self._f.readline()

    def readlines(self):
        return self._f.readlines()

    def write(self, data):
        if "b" in self.mode and isinstance(data, str):
            data = data.encode()
        return self._f.write(data)

    def seek(self, offset, whence=0):
        return self._f.seek(offset, whence)

    def tell(self):
        return self._f.tell()

    def size(self) -> int:
        return os.path.getsize(self.name)

    def flush(self):
        self._f.flush()

    def close(self):
        self._f.close()

    def __iter__(self):
        return iter(self._f)

    def __next__(self):
        return next(self._f)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


Open = FastGFile = GFile


_KINDS = {stat.S_IFDIR: "a folder", stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket"}


def open_regular(path, what: str, max_bytes: int):
    """`path` opened for binary reading once it is known to be a regular file of at most `max_bytes` (links
    followed): for files of folders that may come from elsewhere (checkpoints), where a FIFO would block a
    plain open() forever and /dev/zero or a sparse file would read without end. NotFoundError if it is
    missing, DataLossError naming `what` and the path otherwise.

        >>> with open_regular("run/checkpoint", "checkpoint state file", 1 << 20) as f:  # doctest: +SKIP
        ...     text = f.read()
    """
    path = os.fspath(path)
    try:
        # O_NONBLOCK: opening a FIFO that no one writes returns at once (and fstat then refuses it).
        flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise _not_found(path, what) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = _KINDS.get(stat.S_IFMT(st.st_mode), "not a regular file")
            raise errors.DataLossError(None, None, f"{what} {path!r} is {kind}, not a regular file; replace it "
                                       "with the real file")
        if st.st_size > max_bytes:
            raise errors.DataLossError(None, None, f"{what} {path!r} has {st.st_size} bytes, more than the "
                                       f"{max_bytes} such a file may have (damaged or not what it claims)")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path, what: str, max_bytes: int) -> bytes:
    """The bytes of `path`, read through open_regular (so at most `max_bytes`, even if the file grows)."""
    with open_regular(path, what, max_bytes) as f:
        # NOTE: read(n) allocates n bytes first: ask for what the file has (one more shows that it grew).
        data = f.read(os.fstat(f.fileno()).st_size + 1)
    if len(data) > max_bytes:
        raise errors.DataLossError(None, None, f"{what} {os.fspath(path)!r} grew past {max_bytes} bytes while "
                                   "being read")
    return data


def Exists(filename) -> bool:  # noqa: N802 (TF1's names)
    return os.path.exists(filename)


def IsDirectory(dirname) -> bool:  # noqa: N802
    return os.path.isdir(dirname)


def MakeDirs(dirname) -> None:  # noqa: N802
    """Creates the directory and its parents; an existing directory is fine."""
    os.makedirs(dirname, exist_ok=True)


def MkDir(dirname) -> None:  # noqa: N802
    """Creates one directory; its parent must exist. An existing directory is fine."""
    try:
        os.mkdir(dirname)
    except FileExistsError:
        if not os.path.isdir(dirname):
            raise errors.AlreadyExistsError(None, None, f"MkDir: {dirname} exists and is not a directory") \
                from None
    except FileNotFoundError:
        raise _not_found(os.path.dirname(os.fspath(dirname)), "MkDir") from None


def Glob(pattern) -> list[str]:  # noqa: N802
    return sorted(_glob.glob(os.fspath(pattern)))


def ListDirectory(dirname) -> list[str]:  # noqa: N802
    """The entries' names (not paths), without '.' and '..'."""
    if not os.path.isdir(dirname):
        raise _not_found(dirname, "ListDirectory")
    return sorted(os.listdir(dirname))


def Remove(filename) -> None:  # noqa: N802
    try:
        os.remove(filename)
    except FileNotFoundError:
        raise _not_found(filename, "Remove") from None


def Rename(oldname, newname, overwrite: bool = False) -> None:  # noqa: N802
    if not os.path.exists(oldname):
        raise _not_found(oldname, "Rename")
    if os.path.exists(newname) and not overwrite:
        raise errors.AlreadyExistsError(None, None, f"Rename: {newname} exists (pass overwrite=True)")
    os.replace(oldname, newname)


def Copy(oldpath, newpath, overwrite: bool = False) -> None:  # noqa: N802
    if not os.path.exists(oldpath):
        raise _not_found(oldpath, "Copy")
    if os.path.exists(newpath) and not overwrite:
        raise errors.AlreadyExistsError(None, None, f"Copy: {newpath} exists (pass overwrite=True)")
    shutil.copyfile(oldpath, newpath)


def DeleteRecursively(dirname) -> None:  # noqa: N802
    if not os.path.exists(dirname):
        raise _not_found(dirname, "DeleteRecursively")
    if os.path.isdir(dirname):
        shutil.rmtree(dirname)
    else:
        os.remove(dirname)


def Walk(top, in_order: bool = True):  # noqa: N802
    """(dirname, subdirectory names, file names) for every directory under `top`, parents first when
    in_order."""
    for dirpath, dirnames, filenames in os.walk(top, topdown=in_order):
        yield dirpath, sorted(dirnames), sorted(filenames)


class FileStatistics(NamedTuple):
    """TF1's tf.gfile.Stat result."""
    length: int
    mtime_nsec: int
    is_directory: bool


def Stat(filename) -> FileStatistics:  # noqa: N802
    try:
        st = os.stat(filename)
    except FileNotFoundError:
        raise _not_found(filename, "Stat") from None
    return FileStatistics(st.st_size, st.st_mtime_ns, stat.S_ISDIR(st.st_mode))


# -- atomic writes ----------------------------------------------------------------------------------------------
def atomic_write(path: str, data: bytes) -> None:
    """Writes `data` to `path` so that readers (and a crash) see the old file or the new one, never a torn
    one (see atomic_open)."""
    with atomic_open(path) as f:
        f.write(data)


def write_output(path: str, data: bytes) -> None:
    """Writes a command's output file (`tfplus profile --trace`, `plan --plot`): a regular or new file atomically
    (atomic_write, through a link to its target), so that Ctrl-C or a kill while it is written leaves the earlier
    file, not an empty or torn one; a device or a FIFO (/dev/stdout) as it is.

        >>> write_output("trace.json", b"{}")  # doctest: +SKIP
    """
    target = os.path.realpath(path)
    try:
        regular = stat.S_ISREG(os.stat(target).st_mode)
    except FileNotFoundError:
        regular = True
    if regular:
        atomic_write(target, data)
        return
    with open(target, "wb") as f:
        f.write(data)


@contextlib.contextmanager
def atomic_open(path: str):
    """A binary file to write `path` through: a temporary file in the same folder that on a clean exit is
    fsynced, renamed onto `path` and the rename made durable; on an error it is removed and `path` is as it
    was. For files too large to hold in memory at once (checkpoint data).

        >>> with atomic_open("/tmp/x.bin") as f:  # doctest: +SKIP
        ...     f.write(b"...")
    """
    folder = os.path.dirname(os.path.abspath(path))
    tmp, fd = _locked_temp(folder, os.path.basename(path))
    try:
        f = os.fdopen(fd, "wb", closefd=False)
        try:
            yield f
            f.flush()
            os.fsync(fd)
        finally:
            f.close()
            _close_locked(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_folder(folder)  # make the rename itself durable


# The descriptors of the flocks this process holds (atomic_open's temporary files, folder_lock's folders): their
# paths and open flags, for _drop_inherited_locks.
_held: dict[int, tuple[str, int]] = {}


def _flock(fd: int, path: str, flags: int, how: int) -> None:
    fcntl.flock(fd, how)
    _held[fd] = (path, flags)


def _close_locked(fd: int) -> None:
    _held.pop(fd, None)
    # Unlocked before the close: a child forked meanwhile shares the open file (and so the lock) until its
    # _drop_inherited_locks has run, which may come after the parent's next flock on it.
    if fcntl is not None:
        with contextlib.suppress(OSError):  # a file system without locks
            fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


def _drop_inherited_locks() -> None:
    """In a forked child: each held flock's descriptor made a new, unlocked open of its file. An flock belongs to the
    open file, which a fork shares: a child that lived on (a session's worker processes, forked while another thread
    saved) kept the lock after the parent closed its descriptor, and the parent's next save waited for it forever."""
    for fd, (path, flags) in list(_held.items()):
        try:
            fresh = os.open(path, flags & ~(os.O_CREAT | os.O_EXCL))
        except OSError:  # renamed or deleted since
            fresh = os.open(os.devnull, os.O_RDWR)
        os.dup2(fresh, fd)
        os.close(fresh)
    _held.clear()


if fcntl is not None and hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_drop_inherited_locks)


def _locked_temp(folder: str, name: str) -> tuple[str, int]:
    """A new temporary file for `name` in `folder` and its descriptor, holding an flock on it until closed: the
    lock tells a file still being written from one a killed process left (remove_orphan_temps); the kernel
    releases it when its process dies."""
    while True:
        tmp = os.path.join(folder, f".{name}.{uuid.uuid4().hex[:12]}.tmp")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
        fd = os.open(tmp, flags, 0o666)
        if fcntl is None:
            return tmp, fd
        try:
            _flock(fd, tmp, flags, fcntl.LOCK_EX)
        except OSError:  # a file system without locks (some network ones): written unlocked, as before
            return tmp, fd
        # NOTE: a cleaner may have taken it for an orphan between its creation and the lock, and deleted it.
        with contextlib.suppress(FileNotFoundError):
            if os.stat(tmp).st_ino == os.fstat(fd).st_ino:
                return tmp, fd
        _close_locked(fd)


def fsync_folder(folder: str) -> None:
    """Makes the renames, links and deletions done in `folder` durable (POSIX; elsewhere a no-op)."""
    if os.name == "posix":
        dir_fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def link_or_copy(src: str, dst: str) -> None:
    """`dst` as a second name of the file `src` (a durable copy where the file system has no hard links)."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)
        with open(dst, "rb+") as f:
            os.fsync(f.fileno())


@contextlib.contextmanager
def folder_lock(folder: str):
    """Held while a writer replaces, lists or deletes files in `folder` that another may too: an flock on the
    folder, which every process and thread taking it waits for (a Saver's save, tensor_bundle.replace_bundle). Not
    on POSIX: no lock (one writer per folder)."""
    if fcntl is None:
        yield
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        _flock(fd, folder, os.O_RDONLY, fcntl.LOCK_EX)
        yield
    finally:
        _close_locked(fd)


# The temporary files atomic_write names: `.<name>.<12 hex digits>.tmp`.
_ATOMIC_TEMP = re.compile(r"\..+\.[0-9a-f]{12}\.tmp")


def remove_orphan_temps(folder: str) -> list[str]:
    """Deletes the temporary files that atomic_write left in `folder` when its process was killed mid-write
    (regular files named as atomic_write names them, nothing else); returns their names. One still being
    written, by this process or another, holds its writer's lock and is left alone (without fcntl: call it only
    while no other process writes into `folder`)."""
    removed = []
    for entry in os.scandir(folder):
        if not (_ATOMIC_TEMP.fullmatch(entry.name) and stat.S_ISREG(entry.stat(follow_symlinks=False).st_mode)):
            continue
        try:
            fd = os.open(entry.path, os.O_RDONLY)
        except FileNotFoundError:  # renamed into place meanwhile
            continue
        try:
            if fcntl is not None:
                _flock(fd, entry.path, os.O_RDONLY, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.stat(entry.path).st_ino == os.fstat(fd).st_ino:
                os.remove(entry.path)
                removed.append(entry.name)
        except OSError:  # being written (locked), renamed into place meanwhile, or no locks there: left alone
            pass
        finally:
            _close_locked(fd)
    return sorted(removed)


from tfplus.unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr(__name__, "tf.gfile")

"""Taking a class's submissions in: one layout for the whole input, each student's notebook from their own place.

An input is a folder or a zip. Two layouts, under one root:
  nbgrader   <student>/<assignment>/<notebook>.ipynb
  flat       <student>.ipynb                           (an assignment of one notebook)
A root that holds one folder and no notebook (a zip's wrapping folder, `__MACOSX` aside) is
unwrapped. The layout is decided once for the whole input: `auto` takes the one that accounts
for more students and refuses a tie, naming both sides. A student's notebook is read only from
its place in that layout; everything else is reported by path, with the student whose folder
holds it, and never used: a copy of bob's notebook inside mallory's folder is a stray file of
mallory's, never bob's notebook. Student names with path separators, control characters,
newlines, nbgrader's wildcards or a leading dot are refused and reported.

Nothing is followed or trusted. A folder is walked with lstat, never through a symbolic link;
a notebook is opened from the root one folder at a time with O_NOFOLLOW, and read only if it is
a regular file. A zip is never extracted: its members are listed (a symbolic link by its Unix
mode; absolute paths, `..`, empty parts and duplicates refused) and a notebook is decompressed
in a stream with a byte counter, whatever sizes the archive declares. What is refused at a
student's place (a link, a device, a file too large, a likely zip bomb) leaves that student
graded as the blank notebook, with the reason; only an archive that cannot be used at all (too
many members, too much in all) is refused as a whole.

When each student submitted (`submitted_at`), for late penalties: nbgrader's `timestamp.txt` beside
the notebooks (nbgrader layout; `nbgrader collect` writes it), else the latest modification time of
the student's notebook files (a file's mtime; a zip member's Unix time where the zip records it,
else its local date and time read as UTC), and which of the two it was.
"""

import errno
import os
import stat
import struct
import unicodedata
import zipfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

MIB = 2**20
# A notebook with plots runs to a few MiB; 32 MiB leaves room for many, while the parsed notebook
# (several times the file's size in memory) stays far below what the grader's process can hold.
MAX_NOTEBOOK_BYTES = 32 * MIB
# All the notebooks of one archive, decompressed: a class of 500 at 8 MiB each. Past it the
# archive is refused as a whole (split it), since the rest cannot be told from a bomb.
MAX_ARCHIVE_BYTES = 4 * 2**30
# A zip member that grows more than this many times its compressed size, past its first MiB, is
# refused as a likely zip bomb; notebooks (JSON, base64 images) typically compress under 20-fold.
MAX_RATIO = 200
# Entries of an archive, or of the input's root folder: past it the input is refused as a whole.
MAX_ENTRIES = 100_000
# Entries of one student's folder reported one by one; past it, one line says there were more.
MAX_LISTED = 200
MAX_NAME = 128  # nbgrader keeps a student id in 128 characters
MAX_UNWRAP = 3
LAYOUTS = ("auto", "nbgrader", "flat")
TIMESTAMP = "timestamp.txt"  # nbgrader's record of when a submission was made, beside its notebooks
_CHUNK = MIB


class Refused(Exception):
    """A file that is not taken in; the message says why."""


class ArchiveRefused(ValueError):
    """An archive that cannot be used at all; the message says why."""


@dataclass(frozen=True)
class Submission:
    student: str
    notebook: str
    parts: tuple[str, ...]  # its place in the input

    @property
    def path(self) -> str:
        return shown(self.parts)


@dataclass(frozen=True)
class Refusal:
    path: str  # in the input, as `shown` writes it
    reason: str
    student: str | None = None  # the student whose folder holds it


@dataclass
class Intake:
    layout: str
    root: str  # the folder of the input that holds the submissions ("" for the input itself)
    submissions: list[Submission]
    refused: list[Refusal] = field(default_factory=list)
    bad_names: dict[str, str] = field(default_factory=dict)  # a refused student name, as shown -> why


def shown(parts) -> str:
    """A path in the input as it can be printed: escaped (Python's repr) when it holds odd characters."""
    path = "/".join(parts)
    return path if path.isprintable() else repr(path)


def name_problem(name: str) -> str | None:
    """Why `name` cannot be a student's name (a folder in submitted/, an id in the gradebook), or None."""
    odd = next((c for c in name if unicodedata.category(c)[0] == "C" or unicodedata.category(c) in ("Zl", "Zp")),
               None)
    if not name:
        return "an empty student name"
    if "\n" in name or "\r" in name:
        return "the student name holds a newline"
    if odd is not None:
        return f"the student name holds a control or invisible character (U+{ord(odd):04X})"
    if "/" in name or "\\" in name:
        return "the student name holds a path separator"
    if set(name) & set("*?[]"):
        return "the student name holds a wildcard that nbgrader would expand (* ? [ ])"
    if name.startswith("."):
        return "the student name begins with a dot (a hidden or special folder)"
    if name != name.strip():
        return "the student name begins or ends with a space"
    if len(name) > MAX_NAME:
        return f"the student name is longer than {MAX_NAME} characters"
    return None


# Sources: a folder or a zip, seen the same way -------------------------------------------------------------------

KINDS = {"link": "a symbolic link, not followed", "other": "not a regular file (a device, FIFO or socket)",
         "duplicate": "in the archive more than once", "encrypted": "an encrypted archive member"}


class Folder:
    """A folder of submissions, looked at without following symbolic links."""

    def __init__(self, root: Path):
        self.root = Path(root).resolve()  # the instructor's own path: a link to it is theirs to make
        self.refused: list[Refusal] = []

    def kind(self, parts: tuple[str, ...]) -> str | None:
        """'folder', 'file', 'link', 'other', or None where nothing is (or a folder on the way is not one)."""
        mode = stat.S_IFDIR  # the root
        for i in range(1, len(parts) + 1):
            if not stat.S_ISDIR(mode):
                return None
            try:
                mode = os.lstat(self.root.joinpath(*parts[:i])).st_mode
            except (OSError, ValueError):
                return None
        return ("folder" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode)
                else "link" if stat.S_ISLNK(mode) else "other")

    def names(self, parts: tuple[str, ...], limit: int) -> tuple[list[str], bool]:
        """The names in a folder (sorted; at most `limit`) and whether there were more."""
        if self.kind(parts) != "folder":
            return [], False
        names = []
        with os.scandir(self.root.joinpath(*parts)) as entries:
            for entry in entries:
                if len(names) == limit:
                    return sorted(names), True
                names.append(entry.name)
        return sorted(names), False

    def modified(self, parts: tuple[str, ...]) -> datetime:
        """The file's modification time, in UTC."""
        return datetime.fromtimestamp(os.lstat(self.root.joinpath(*parts)).st_mtime, timezone.utc)

    def read(self, parts: tuple[str, ...]) -> bytes:
        """The file's bytes, opened from the root one folder at a time, never through a link."""
        if self.kind(parts) != "file":
            raise Refused(KINDS.get(self.kind(parts), "not a file"))
        folder = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for name in parts[:-1]:
                inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=folder)
                os.close(folder)
                folder = inner
            fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY, dir_fd=folder)
        except OSError as error:  # it changed since it was looked at
            why = KINDS["link"] if error.errno == errno.ELOOP else f"could not be opened ({error.strerror})"
            raise Refused(why) from None
        finally:
            os.close(folder)
        with os.fdopen(fd, "rb") as file:
            facts = os.fstat(file.fileno())
            if not stat.S_ISREG(facts.st_mode):
                raise Refused(KINDS["other"])
            if facts.st_size > MAX_NOTEBOOK_BYTES:
                raise Refused(f"a file of {facts.st_size / MIB:.1f} MiB, over the {MAX_NOTEBOOK_BYTES // MIB} MiB "
                              "limit for a notebook")
            return _bounded(file)


class Archive:
    """A zip of submissions, listed and read member by member, never extracted."""

    def __init__(self, path: Path):
        self.path = path
        self.zip = zipfile.ZipFile(path)
        members = self.zip.infolist()
        if len(members) > MAX_ENTRIES:
            self.zip.close()
            raise ArchiveRefused(f"the archive {path} has {len(members)} members, over the limit of {MAX_ENTRIES}")
        self.refused: list[Refusal] = []
        self.files: dict[tuple[str, ...], list[zipfile.ZipInfo]] = {}
        self.folders: dict[tuple[str, ...], set[str]] = {(): set()}
        for member in members:
            parts = tuple(member.filename.rstrip("/").split("/"))
            unsafe = _unsafe(member.filename, parts)
            if unsafe:
                self.refused.append(Refusal(shown([member.filename]), f"an unsafe path in the archive: {unsafe}"))
                continue
            for i in range(len(parts)):
                self.folders.setdefault(parts[:i], set()).add(parts[i])
            if _mode(member) == "folder":
                self.folders.setdefault(parts, set())
            else:
                self.files.setdefault(parts, []).append(member)
        self.total = 0  # bytes decompressed so far

    def close(self):
        self.zip.close()

    def kind(self, parts: tuple[str, ...]) -> str | None:
        if parts in self.files:
            members = self.files[parts]
            return "duplicate" if len(members) > 1 or parts in self.folders else _mode(members[0])
        return "folder" if parts in self.folders else None

    def names(self, parts: tuple[str, ...], limit: int) -> tuple[list[str], bool]:
        names = sorted(self.folders.get(parts, ()))
        return names[:limit], len(names) > limit

    def modified(self, parts: tuple[str, ...]) -> datetime:
        """The member's modification time: the Unix time of its "UT" extra field (Info-ZIP's, which most zip tools
        write), else its DOS date and time, which carry no time zone, read as UTC."""
        member = self.files[parts][0]
        extra = member.extra
        while len(extra) >= 4:
            tag, size = struct.unpack("<HH", extra[:4])
            body = extra[4:4 + size]
            if tag == 0x5455 and len(body) >= 5 and body[0] & 1:  # flag bit 0: the modification time follows
                return datetime.fromtimestamp(struct.unpack("<i", body[1:5])[0], timezone.utc)
            extra = extra[4 + size:]
        return datetime(*member.date_time, tzinfo=timezone.utc)

    def read(self, parts: tuple[str, ...]) -> bytes:
        """The member's bytes, decompressed in a stream and counted: its declared sizes are not trusted."""
        if self.kind(parts) != "file":
            raise Refused(KINDS.get(self.kind(parts), "not a file"))
        member = self.files[parts][0]
        chunks, size = [], 0
        try:
            with self.zip.open(member) as stream:
                while chunk := stream.read(_CHUNK):
                    size += len(chunk)
                    self.total += len(chunk)
                    if self.total > MAX_ARCHIVE_BYTES:
                        raise ArchiveRefused(f"the notebooks in the archive {self.path} decompress to more than "
                                         f"{MAX_ARCHIVE_BYTES // 2**30} GiB in all: split it")
                    if size > MAX_NOTEBOOK_BYTES:
                        raise Refused(f"over the {MAX_NOTEBOOK_BYTES // MIB} MiB limit for a notebook once "
                                      "decompressed")
                    if size > MIB and size > MAX_RATIO * max(member.compress_size, 1):
                        raise Refused(f"a likely zip bomb: it decompresses to over {MAX_RATIO} times its size")
                    chunks.append(chunk)
        except (Refused, ArchiveRefused):
            raise
        except Exception as error:  # a bad CRC, an unknown compression, a truncated archive
            raise Refused(f"could not be decompressed ({type(error).__name__}: {error})") from None
        return b"".join(chunks)


def _unsafe(name: str, parts: tuple[str, ...]) -> str | None:
    if name.startswith("/") or (parts and len(parts[0]) == 2 and parts[0][1] == ":"):
        return "an absolute path"
    if "\\" in name:
        return "a backslash (a Windows path?)"
    if ".." in parts:
        return "`..` leaves the input"
    if "" in parts or "." in parts:
        return "an empty or `.` part"
    return None


def _mode(member: zipfile.ZipInfo) -> str:
    """What a member is, by the Unix mode zip tools store in its external attributes."""
    if member.flag_bits & 0x1:
        return "encrypted"
    mode = member.external_attr >> 16
    if stat.S_IFMT(mode) and not stat.S_ISREG(mode):
        return "folder" if stat.S_ISDIR(mode) else "link" if stat.S_ISLNK(mode) else "other"
    return "folder" if member.filename.endswith("/") else "file"


def _bounded(file) -> bytes:
    chunks, size = [], 0
    while chunk := file.read(min(_CHUNK, MAX_NOTEBOOK_BYTES + 1 - size)):
        size += len(chunk)
        if size > MAX_NOTEBOOK_BYTES:  # it grew since its size was read
            raise Refused(f"over the {MAX_NOTEBOOK_BYTES // MIB} MiB limit for a notebook")
        chunks.append(chunk)
    return b"".join(chunks)


def open_input(path: Path) -> "Folder | Archive":
    """The source of a class's submissions: a folder, or a zip file. Close an Archive when done."""
    path = Path(path)
    if path.is_dir():
        return Folder(path)
    if path.is_file() and zipfile.is_zipfile(path):
        try:
            return Archive(path)
        except zipfile.BadZipFile as error:
            raise ValueError(f"the archive {path} cannot be read: {error}") from None
    raise ValueError(f"submissions must be a folder or a zip file, got {path}")


# The layout -----------------------------------------------------------------------------------------------------

def collect(source, assignment: str, notebooks: list[str], layout: str = "auto") -> Intake:
    """The submissions in `source` (see the module docstring) and a report of everything else in it."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    refused = list(source.refused)
    root = _unwrap(source, assignment, refused)
    found = {"nbgrader": _nbgrader(source, root, assignment, notebooks), "flat": _flat(source, root, notebooks)}
    if layout == "flat" and len(notebooks) != 1:
        raise ValueError(f"assignment {assignment!r} has {len(notebooks)} notebooks ({', '.join(notebooks)}): "
                         f"submissions must use nbgrader's <student>/{assignment}/<notebook>.ipynb layout")
    chosen = layout
    if layout == "auto":
        students = {name: {s.student for s in subs} for name, subs in found.items()}
        if len(students["nbgrader"]) == len(students["flat"]) and students["flat"]:
            raise ValueError(
                f"the submissions fit two layouts for {len(students['flat'])} students each; pass --layout nbgrader "
                f"or --layout flat.\n  nbgrader: {_some(found['nbgrader'])}\n  flat: {_some(found['flat'])}")
        chosen = max(found, key=lambda name: len(students[name]))
    submissions = found[chosen]
    _report_the_rest(source, root, assignment, chosen, submissions, refused)
    if not submissions:
        where = f" in {shown(root)}/" if root else ""
        patterns = [f"<student>/{assignment}/<notebook>.ipynb"] * (layout != "flat")
        patterns += ["<student>.ipynb"] * (len(notebooks) == 1 and layout != "nbgrader")
        there = "".join(f"\n  {r.path}: {r.reason}" for r in refused[:10]) or " nothing"
        raise ValueError(f"no submissions found{where}: expected {' or '.join(patterns)}, the notebooks being "
                         f"{', '.join(nb + '.ipynb' for nb in notebooks)}; found:{there}")
    intake = Intake(chosen, shown(root), [], refused)
    for submission in submissions:
        problem = name_problem(submission.student)
        if problem:
            intake.bad_names[repr(submission.student)] = problem
            refused.append(Refusal(submission.path, problem))
        else:
            intake.submissions.append(submission)
    return intake


def submitted_at(source, layout: str, submissions: list[Submission]) -> tuple[datetime | None, str]:
    """When one student submitted (their `submissions`, one per notebook), in UTC, and where that comes from:
    in nbgrader's layout its timestamp.txt beside the notebooks when it is there and readable, else the latest
    modification time of the notebook files (see the module docstring); None when no notebook is a file."""
    from nbgrader.utils import parse_utc

    stamp, problem = submissions[0].parts[:-1] + (TIMESTAMP,), ""
    if layout == "nbgrader" and source.kind(stamp) == "file":
        try:
            when = parse_utc(source.read(stamp)[:200].decode().strip())  # a naive datetime in UTC
            return when.replace(tzinfo=timezone.utc), TIMESTAMP
        except (Refused, ValueError, OverflowError, UnicodeDecodeError) as error:
            problem = f" ({TIMESTAMP} was unreadable: {str(error)[:100]})"
    files = [s.parts for s in submissions if source.kind(s.parts) == "file"]
    if not files:
        return None, "none (no notebook file to date)"
    return max(source.modified(parts) for parts in files), "the notebook file's modification time" + problem


def _some(submissions: list[Submission], n: int = 5) -> str:
    more = f" and {len(submissions) - n} more" if len(submissions) > n else ""
    return ", ".join(s.path for s in submissions[:n]) + more


def _root_names(source, root: tuple[str, ...]) -> list[str]:
    names, more = source.names(root, MAX_ENTRIES)
    if more:
        raise ValueError(f"{shown(root) or 'the input'} holds more than {MAX_ENTRIES} entries")
    return names


def _unwrap(source, assignment: str, refused: list[Refusal]) -> tuple[str, ...]:
    """The folder that holds the submissions: the input, or the one folder it wraps (see the module docstring)."""
    root = ()
    for _ in range(MAX_UNWRAP):
        names = _root_names(source, root)
        folders = [n for n in names if source.kind(root + (n,)) == "folder" and n != "__MACOSX"]
        if (len(folders) != 1 or any(n.endswith(".ipynb") for n in names)
                or source.kind(root + (folders[0], assignment)) is not None):
            break
        refused += [Refusal(shown(root + (n,)), "beside the folder that holds the submissions; not used")
                    for n in names if n != folders[0]]
        root += (folders[0],)
    return root


def _nbgrader(source, root, assignment, notebooks) -> list[Submission]:
    found = []
    for name in _root_names(source, root):
        if source.kind(root + (name,)) == "folder" and source.kind(root + (name, assignment)) == "folder":
            found += [Submission(name, nb, root + (name, assignment, f"{nb}.ipynb")) for nb in notebooks
                      if source.kind(root + (name, assignment, f"{nb}.ipynb")) not in (None, "folder")]
    return found


def _flat(source, root, notebooks) -> list[Submission]:
    if len(notebooks) != 1:
        return []
    return [Submission(name.removesuffix(".ipynb"), notebooks[0], root + (name,))
            for name in _root_names(source, root)
            if name.endswith(".ipynb") and source.kind(root + (name,)) not in (None, "folder")]


def _report_the_rest(source, root, assignment, layout, submissions, refused: list[Refusal]) -> None:
    """Everything in the input that is not a submission in `layout`: reported, never used."""
    used = {s.parts for s in submissions}
    students = {s.student for s in submissions}
    pattern = f"<student>/{assignment}/<notebook>.ipynb" if layout == "nbgrader" else "<student>.ipynb"
    expected = f"not a submission (the layout is {pattern})"
    for name in _root_names(source, root):
        parts = root + (name,)
        if parts in used:
            continue
        if layout == "flat" or name not in students:
            if layout == "nbgrader" and source.kind(parts) == "folder" and source.kind(parts + (assignment,)):
                parts += (assignment,)  # a student's folder with a link, or no notebook, in place of a submission
                why = KINDS.get(source.kind(parts), f"holds none of the notebooks ({pattern.split('/')[-1]})")
            else:
                why = KINDS.get(source.kind(parts), expected)
            refused.append(Refusal(shown(parts), why))
            continue
        student = None if name_problem(name) else name
        for inner, why in _walk_student(source, parts, assignment):
            if inner not in used and inner[-2:] != (assignment, TIMESTAMP):
                why = why or KINDS.get(source.kind(inner), expected)
                refused.append(Refusal(shown(inner), why, student))


def _walk_student(source, folder: tuple[str, ...], assignment: str):
    """What a student's folder holds, to report: its entries and those of its assignment folder (not deeper)."""
    too_many = f"more than {MAX_LISTED} entries here; the rest were not looked at"
    names, more = source.names(folder, MAX_LISTED)
    for name in names:
        if name == assignment and source.kind(folder + (name,)) == "folder":
            inner, inner_more = source.names(folder + (name,), MAX_LISTED)
            yield from ((folder + (name, n), None) for n in inner)
            if inner_more:
                yield folder + (name,), too_many
        else:
            yield folder + (name,), None
    if more:
        yield folder, too_many

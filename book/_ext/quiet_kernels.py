"""Pages run in kernels that say nothing unless something is wrong.

Every page's kernel logged "Kernel is running over TCP without encryption" (ipykernel warns whenever the
transport is TCP without CurveZMQ keys). The build's kernels listen on loopback and live for one page, so the
line is noise that buries real warnings: the kernels the build starts read an IPython profile of the build's own,
in a temporary directory, that logs errors only. A student's JupyterLab is not affected."""

import atexit
import os
import shutil
import tempfile
from pathlib import Path

KERNEL_CONFIG = "c.IPKernelApp.log_level = 'ERROR'\n"


def setup(app):
    ipython_dir = Path(tempfile.mkdtemp(prefix="aisys-book-ipython-"))
    atexit.register(shutil.rmtree, ipython_dir, ignore_errors=True)
    (ipython_dir / "profile_default").mkdir()
    (ipython_dir / "profile_default" / "ipython_kernel_config.py").write_text(KERNEL_CONFIG)
    os.environ["IPYTHONDIR"] = str(ipython_dir)  # inherited by the kernels this process starts
    return {"parallel_read_safe": True, "parallel_write_safe": True}

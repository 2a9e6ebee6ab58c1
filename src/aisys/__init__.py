"""aisys: small, readable reference implementations of how AI runs on hardware.

One module per topic; the book imports these and the exercise checks compare
student code against them. Importing `aisys` is cheap: torch and friends are
imported only by the modules that need them.
"""

__version__ = "0.1.0"

import os as _os

# torch.cuda.is_available() asks NVML instead of initialising the CUDA driver. A process that has
# initialised the driver cannot fork children that use the GPU, and forked ranks running NCCL
# (aisys.collectives.launch) are how this course runs collectives on GPUs.
_os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")

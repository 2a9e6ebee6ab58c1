"""aisys: small, readable reference implementations of how AI runs on hardware.

One module per topic; the book imports these and the exercise checks compare
student code against them. Importing `aisys` is cheap: torch and friends are
imported only by the modules that need them.
"""

__version__ = "0.1.0"

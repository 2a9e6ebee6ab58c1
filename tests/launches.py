"""Which Triton kernels a call launched: a module's kernels replaced, for one test, by recorders of their launches."""


class _Recorder:
    """Stands for a kernel in its module: notes a label at each launch, then launches it."""

    def __init__(self, kernel, label, launched):
        self.kernel, self.label, self.launched = kernel, label, launched

    def __getitem__(self, grid):
        self.launched.append(self.label)
        return self.kernel[grid]


def record_launches(monkeypatch, module, labels: dict) -> list:
    """Replace module.<attribute> by a recorder for each attribute: label of `labels`; the list they append to."""
    launched = []
    for attribute, label in labels.items():
        monkeypatch.setattr(module, attribute, _Recorder(getattr(module, attribute), label, launched))
    return launched

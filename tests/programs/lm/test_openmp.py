"""A thread that ran torch gives its OpenMP helper threads back."""


def test_a_thread_can_give_its_openmp_helper_threads_back():
    import sys

    import torch

    from ragscale.programs.lm.openmp import release_openmp_threads

    torch.randn(256, 256) @ torch.randn(256, 256)
    assert release_openmp_threads() == sys.platform.startswith("linux")

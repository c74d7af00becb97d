"""jacond recipe gpu reads what the GPU machine printed: a test process that died of a signal is named
on the page (the first H200 run's four segmentation faults were missing from it: only ctest's
summary line was kept)."""

from jacond_recipes import gpu

LOG = """name, memory.total [MiB], driver_version
NVIDIA H200, 143771 MiB, 580.159.04
=== item 1 (item1_tests), cap 360 s, this call's time left 420 s
 1/26 Test  #71: CliTest.BlockDeviceCudaRunsOnTheGpuOrSaysWhyNot_n8_d16_h2 ....***Exception: SegFault  2.27 sec
 3/26 Test  #13: DenseCuda.AgreesWithTheCpuRouteOnABareAttentionJacobian .......   Passed    2.24 sec
85% tests passed, 4 tests failed out of 26
The following tests FAILED:
\t 71 - CliTest.BlockDeviceCudaRunsOnTheGpuOrSaysWhyNot_n8_d16_h2 (SEGFAULT)
\t 80 - Some.Test (Failed)
Fatal Python error: Segmentation fault
environment: line 1:  2478 Segmentation fault      python3 -m pytest -q python/tests -k device_cuda
=== item 1 took 45 s (rc 139)
"""


def test_failed_tests_and_signal_deaths_are_kept(tmp_path):
    path = tmp_path / "gpu_measure-1.log"
    path.write_text(LOG)
    log = gpu.Log([str(path)])
    assert log.device == "NVIDIA H200, 143771 MiB, 580.159.04"
    assert log.items[1] == (45, 139)
    assert "85% tests passed, 4 tests failed out of 26" in log.test_lines
    assert "71 - CliTest.BlockDeviceCudaRunsOnTheGpuOrSaysWhyNot_n8_d16_h2 (SEGFAULT)" in log.test_lines
    assert "80 - Some.Test (Failed)" in log.test_lines
    assert "Fatal Python error: Segmentation fault" in log.test_lines
    assert any("Segmentation fault      python3" in line for line in log.test_lines)
    assert not any("Passed" in line for line in log.test_lines)

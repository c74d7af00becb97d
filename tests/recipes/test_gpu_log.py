"""jacond recipe gpu reads what the GPU machine printed: a test process that died of a signal is named
on the page (the first H200 run's four segmentation faults were missing from it: only ctest's
summary line was kept)."""

import pathlib

from jacond_recipes import common, gpu

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


# A GPU machine where CUDA was not usable (a driver too old for the runtime): ctest says every test
# passed, because it counts a skip as a pass; the Python device test skipped too.
SKIPPED_LOG = """name, memory.total [MiB], driver_version
NVIDIA H200, 143771 MiB, 470.57.02
=== item 1 (item1_tests), cap 360 s, this call's time left 420 s
$ ctest -R "DenseCuda|DeviceCuda|AdamWCuda|SoapCuda|NcclRankGroup"
 1/4 Test  #13: DenseCuda.AgreesWithTheCpuRouteOnABareAttentionJacobian .......***Skipped   0.02 sec
100% tests passed, 0 tests failed out of 4
The following tests did not run:
\t 13 - DenseCuda.AgreesWithTheCpuRouteOnABareAttentionJacobian (Skipped)
\t 24 - DenseCuda.NoDeviceIsACudaErrorNamingTheCall (Skipped)
\t 30 - AdamWCuda.MatchesLibTorchsAdamWOnTheGpuAndTheCpu (Skipped)
GPU tests that did not run on this GPU machine (2): DenseCuda.AgreesWithTheCpuRouteOnABareAttentionJacobian AdamWCuda.MatchesLibTorchsAdamWOnTheGpuAndTheCpu
1 skipped, 40 deselected in 0.51s
=== item 1 took 12 s (rc 1)
"""


def test_skipped_tests_are_counted_and_named_apart_from_those_skipped_by_design(tmp_path):
    path = tmp_path / "gpu_measure-1.log"
    path.write_text(SKIPPED_LOG)
    log = gpu.Log([str(path)])
    assert log.skipped == ["DenseCuda.AgreesWithTheCpuRouteOnABareAttentionJacobian",
                           "DenseCuda.NoDeviceIsACudaErrorNamingTheCall", "AdamWCuda.MatchesLibTorchsAdamWOnTheGpuAndTheCpu"]
    assert log.pytest_skipped == 1
    assert "13 - DenseCuda.AgreesWithTheCpuRouteOnABareAttentionJacobian (Skipped)" in log.test_lines
    assert not any("***Skipped" in line for line in log.test_lines)  # the progress lines repeat the list
    report = common.Report("gpu")
    gpu.tests_section(None, report, log)
    page = report.markdown()
    assert "100% tests passed, 0 tests failed out of 4" in page
    assert ("**2 GPU tests did not run** (skipped on the GPU machine: they measured nothing): "
            "`DenseCuda.AgreesWithTheCpuRouteOnABareAttentionJacobian`, `AdamWCuda.MatchesLibTorchsAdamWOnTheGpuAndTheCpu`; "
            "the Python module's device test: 1 skipped; 1 more skipped by design (it checks the no-GPU path).") in page
    # ctest's "100% tests passed" counted the three skips as passed: the page does not.
    assert log.ctest_runs == [[4, 0, 3]]
    assert "ctest: **1 of 4 GPU tests passed**, 0 failed, 3 skipped (ctest's \"tests passed\" counts a skipped test as passed)." in page


def test_the_tests_that_check_the_no_gpu_path_are_skipped_by_design(tmp_path):
    """The first H200 run's log: its two skips are NO_GPU_TESTS, and a test seen in two calls' logs
    counts once."""
    for call in (1, 2):
        (tmp_path / f"gpu_measure-{call}.log").write_text(LOG.replace(
            "=== item 1 took", "\t 24 - DenseCuda.NoDeviceIsACudaErrorNamingTheCall (Skipped)\n=== item 1 took"))
    log = gpu.Log([str(tmp_path / "gpu_measure-1.log"), str(tmp_path / "gpu_measure-2.log")])
    assert log.skipped == ["DenseCuda.NoDeviceIsACudaErrorNamingTheCall"]
    assert gpu.skipped_line(log) == "Every GPU test ran, except the 1 that checks the no-GPU path (skipped by design)."
    assert gpu.counts_line(log) == ("In the last of item 1's 2 ctest runs: **21 of 26 GPU tests passed**, 4 failed, "
                                    "1 skipped (ctest's \"tests passed\" counts a skipped test as passed).")
    log.skipped = []
    assert gpu.skipped_line(log) == "Every GPU test ran."


def test_the_first_h200_runs_tests_are_20_passed_2_skipped_4_failed():
    """The committed log of the first H200 run: ctest's "85% tests passed, 4 tests failed out of 26"
    includes its two skips, so 20 passed, not 22."""
    measured = pathlib.Path(__file__).resolve().parents[2] / "reports/gpu/measured/2026-11-27-h200"
    log = gpu.Log([str(measured / "gpu_measure-1.log"), str(measured / "gpu_measure-2.log")])
    assert log.ctest_runs == [[26, 4, 2]]
    assert gpu.counts_line(log) == ("ctest: **20 of 26 GPU tests passed**, 4 failed, 2 skipped "
                                    "(ctest's \"tests passed\" counts a skipped test as passed).")
    assert gpu.counts_line(gpu.Log([])) is None


class Lines:
    """The part of a report tracking_line and op_count_line write to."""

    def __init__(self):
        self.lines = []

    def text(self, s):
        self.lines.append(s)


class Run:
    def __init__(self, work_dir):
        self.work_dir = str(work_dir)


def lines_of(line_fn, work, folder=None, run_json=None):
    """The lines line_fn writes for a work folder whose FOLDER/run.json holds RUN_JSON (none: absent)."""
    if folder is not None:
        (work / folder).mkdir(parents=True)
        (work / folder / "run.json").write_text(run_json)
    report = Lines()
    line_fn(Run(work), report)
    return report.lines


def test_tracking_line_reads_both_timings_of_bench_train(tmp_path):
    # Numbers of this test's own making: the line is their ratio, host over GPU.
    both = lines_of(gpu.tracking_line, tmp_path / "both", "bench-train-tracking",
                    '{"tracking": {"track_every": 100, "where": "dense: GPU X; products: ATen on cuda:0",'
                    ' "chosen": {"matrices": "K_sa,K_sab,K_ffn", "seconds": 0.5, "reports": 20},'
                    ' "chosen_on_host": {"seconds": 2.0, "reports": 20}}}')
    assert len(both) == 1
    assert "K_sa,K_sab,K_ffn, 20 reports" in both[0] and "dense: GPU X" in both[0]
    assert "0.5 s" in both[0] and "2 s" in both[0] and "**4×**" in both[0]
    alone = lines_of(gpu.tracking_line, tmp_path / "host-only", "bench-train-tracking",
                     '{"tracking": {"where": "dense: host; products: host",'
                     ' "chosen": {"matrices": "K_sa", "seconds": 1.5, "reports": 4}}}')
    assert alone == ["- One tracking call (K_sa, 4 reports) on dense: host; products: host: 1.5 s; not timed on "
                     "the host as well: this run tracked on the host already."]
    assert lines_of(gpu.tracking_line, tmp_path / "nowhere") == [
        "- Tracking on the GPU against the host (`bench-train-tracking/`): not measured."]


def test_op_count_line_sums_both_routes_counts(tmp_path):
    counted = lines_of(gpu.op_count_line, tmp_path / "counted", "bench-train",
                       '{"aten_ops": {"jacond": {"model": {"aten::addmm": 5, "aten::mm": 10},'
                       ' "optimizer": {"aten::_foreach_mul_": 4}}, "pytorch": {"model": {"aten::addmm": 5,'
                       ' "aten::mm": 10, "aten::slice": 1}, "optimizer": {"aten::_foreach_mul_": 3}}}}')
    assert counted == ["- ATen operations in one AdamW step (nested included): model pass jacond 15, PyTorch 16; "
                       "optimizer.step() jacond 4, PyTorch 3."]
    with_soap = lines_of(gpu.op_count_line, tmp_path / "with-soap", "bench-train",
                         '{"aten_ops": {"jacond": {"model": {"aten::mm": 10}, "optimizer": {"aten::_foreach_mul_": 4},'
                         ' "soap_optimizer": {"aten::bmm": 20, "aten::_foreach_add_": 7}}, "pytorch": {"model":'
                         ' {"aten::mm": 10}, "optimizer": {"aten::_foreach_mul_": 3}}}}')
    assert with_soap == ["- ATen operations in one AdamW step (nested included): model pass jacond 10, PyTorch 10; "
                         "optimizer.step() jacond 4, PyTorch 3; SOAP's optimizer.step() jacond 27."]
    assert lines_of(gpu.op_count_line, tmp_path / "nowhere") == ["- ATen operations per step: not counted in this run."]


def test_a_route_that_gave_no_kappa_has_no_speed_ratio(tmp_path):
    """The dense table blanks "CPU exact s / this s" where the route's status is not-converged (its time
    bought no κ), as reports/scale does; the exact routes keep theirs."""
    (tmp_path / "bench-dense-t16").mkdir()
    columns = "threads,route,method,total_s,cpu_exact_over_this,kappa,status,agree_with_cpu_exact"
    (tmp_path / "bench-dense-t16" / "bench_dense.csv").write_text("\n".join([
        columns,
        "16,jacond-exact-kappa,dense-lu-lanczos,3.885,,7.194e9,exact,",
        "16,jacond-mixed-kappa,dense-lu32-refined-lanczos,1.775,2.189,nan,not-converged,not-converged",
        "16,jacond-exact-kappa-cuda,dense-lu-lanczos-cuda,0.3349,11.6,7.194e9,exact,PASS",
        "16,jacond-mixed-kappa-cuda,dense-lu32-refined-lanczos-cuda,0.3587,10.83,nan,not-converged,not-converged",
    ]) + "\n")
    report = common.Report("gpu")
    gpu.dense_section(Run(tmp_path), report, gpu.Log([]))
    rows = {line.split(" | ")[1]: line.split(" | ") for line in report.markdown().splitlines() if line.startswith("| 16 |")}
    ratio = columns.split(",").index("cpu_exact_over_this")
    assert rows["jacond-mixed-kappa"][ratio] == "" and rows["jacond-mixed-kappa-cuda"][ratio] == ""
    assert rows["jacond-exact-kappa-cuda"][ratio] == "11.6"
    assert "**11.6×** (misses the ≥ 20× target)" in report.markdown()

// `--device cpu|cuda`: where the dense exact routes run (analysis/spectral/dense_device.h), for
// block, sweep, spectrum, audit and bench dense, and where the lanczos route's matrix-free
// products run (analysis/operators/operator_device.h) for block, sweep and audit.
#pragma once

#include <memory>
#include <string>

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include "analysis/report/block_report.h"
#include "analysis/spectral/dense_device.h"
#include "models/track/conditioning.h"

namespace jacond::cli {

/// Adds --device to `desc`, bound to `device` (default "cpu").
void add_device_option(boost::program_options::options_description& desc, std::string* device);

/// Checks the --device value without touching a device: "cpu", or "cuda" in a jacond built with
/// the CUDA back end (JACOND_CUDA, docs/design.md §10). Throws std::invalid_argument naming the
/// value otherwise (a usage error: exit 2).
void validate_device_name(const std::string& device);

/// Refuses (std::invalid_argument: exit 2) a --kappa flavour the --device does not run: schur is
/// the host's block LU, and a GPU takes its own Schur route where its LU does not fit (a sweep
/// with both ran the host's route while run.json said cuda).
void check_kappa_on_device(const std::string& kappa, const std::string& device);

/// The DenseDevice for a validated --device value. "cuda" without a usable GPU throws
/// std::runtime_error naming the reason (exit 1: the flag is right, this machine has no device).
std::shared_ptr<const DenseDevice> select_dense_device(const std::string& device);

/// Both devices of a validated --device value into opt: opt.device (select_dense_device) and
/// opt.operator_device: on "cuda" the block's operators in ATen on the GPU
/// (models/device/torch_operator_device.h), or, where this LibTorch has no CUDA, the host's kernels
/// with one line on stderr saying so; on "cpu" the host's kernels.
void select_devices(const std::string& device, BlockReportOptions& opt);

/// Where `jacond train --device cuda` tracks conditioning (models::TrackDevices,
/// models/track/conditioning.h): the GPU's dense routes (the CUDA module, as select_dense_device)
/// and matrix-free products, both on cuda:`index` (the rank's own GPU, from any thread). The host
/// for "cpu", and where
/// this LibTorch sees no GPU (train then refuses --device cuda itself, with its own message). A
/// piece that cannot be had (no CUDA back end in this jacond, a module that does not load) stays
/// on the host with one line on stderr: training does not depend on it.
models::TrackDevices select_track_devices(const std::string& device, int index);

/// run.json fields of a device: {"name": ..., "description": ...}.
nlohmann::json device_json(const DenseDevice& device);
/// The same, plus "matrix_free": where the lanczos route's products ran.
nlohmann::json device_json(const BlockReportOptions& opt);
/// One line for logs: the dense device's description and where the products run.
std::string device_description(const BlockReportOptions& opt);

}  // namespace jacond::cli

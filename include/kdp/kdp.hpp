#pragma once
/// \file
/// The umbrella header: everything kdp offers.

#include "kdp/config.hpp"
#include "kdp/version.hpp"

#include "kdp/core/binding.hpp"
#include "kdp/core/caching_allocator.hpp"
#include "kdp/core/checked_size.hpp"
#include "kdp/core/device.hpp"
#include "kdp/core/error.hpp"
#include "kdp/core/regular_file.hpp"
#include "kdp/core/runtime.hpp"
#include "kdp/core/shape.hpp"
#include "kdp/core/tensor.hpp"
#include "kdp/core/threads.hpp"

#include "kdp/autograd/engine.hpp"
#include "kdp/autograd/grad_mode.hpp"
#include "kdp/autograd/node.hpp"

#include "kdp/ops/activation.hpp"
#include "kdp/ops/elementwise.hpp"
#include "kdp/ops/linear.hpp"
#include "kdp/ops/loss.hpp"
#include "kdp/ops/reduction.hpp"

#include "kdp/nn/activation.hpp"
#include "kdp/nn/bound_module.hpp"
#include "kdp/nn/clip_grad.hpp"
#include "kdp/nn/init.hpp"
#include "kdp/nn/linear.hpp"
#include "kdp/nn/loss.hpp"
#include "kdp/nn/module.hpp"
#include "kdp/nn/parameter_memory.hpp"
#include "kdp/nn/sequential.hpp"

#include "kdp/optim/adam.hpp"
#include "kdp/optim/lr_scheduler.hpp"
#include "kdp/optim/optimizer.hpp"
#include "kdp/optim/sgd.hpp"

#include "kdp/parallel/data_parallel.hpp"
#include "kdp/parallel/devices.hpp"
#include "kdp/parallel/gather.hpp"
#include "kdp/parallel/parallel_apply.hpp"
#include "kdp/parallel/replicate.hpp"
#include "kdp/parallel/scatter.hpp"

#include "kdp/dist/communicator.hpp"
#include "kdp/dist/distributed_data_parallel.hpp"
#include "kdp/dist/gradient_bucket.hpp"
#include "kdp/dist/watchdog.hpp"

#include "kdp/data/data_loader.hpp"
#include "kdp/data/dataset.hpp"
#include "kdp/data/distributed_sampler.hpp"
#include "kdp/data/sampler.hpp"
#if KDP_ENABLE_HDF5
#include "kdp/data/hdf5_dataset.hpp"
#include "kdp/data/idx.hpp"
#include "kdp/data/importer.hpp"
#include "kdp/io/checkpoint.hpp"
#include "kdp/io/checkpoint_directory.hpp"
#include "kdp/io/run_config.hpp"
#include "kdp/io/run_directory_error.hpp"
#include "kdp/io/hdf5.hpp"
#include "kdp/train/metrics_writer.hpp"
#include "kdp/train/progress.hpp"
#include "kdp/train/trainer.hpp"
#endif
#include "kdp/core/stop_signal.hpp"
#include "kdp/io/atomic_file.hpp"

#include "kdp/parallel/parallel_apply.hpp"

#include <fmt/format.h>

#include <mutex>

#include "core/check.hpp"
#include "kdp/core/error.hpp"
#include "kdp/core/execution_context.hpp"
#include "kdp/core/runtime.hpp"
#include "kdp/parallel/replica_group.hpp"

namespace kdp {

namespace {

// Rethrows `error` as the same kind of kdp error with `context` before its message
// (raw throws: the message already has its origin; the context names the replica).
[[noreturn]] void rethrow_in_context(const std::exception_ptr& error, const std::string& context) {
  try {
    std::rethrow_exception(error);
  } catch (const ShapeError& e) {
    throw ShapeError(context + e.what());
  } catch (const DeviceError& e) {
    throw DeviceError(context + e.what());
  } catch (const ValueError& e) {
    throw ValueError(context + e.what());
  } catch (const StateError& e) {
    throw StateError(context + e.what());
  } catch (const IOError& e) {
    throw IOError(context + e.what());
  } catch (const CommError& e) {
    throw CommError(context + e.what());
  } catch (const NumericalError& e) {
    throw NumericalError(context + e.what());
  } catch (const std::exception& e) {
    throw Error(context + e.what());
  } catch (...) {
    throw Error(context + "unknown exception");
  }
}

// Replicas that meet in their forward (SyncBatchNorm): each on a thread of its
// own (the Runtime's, kept from one forward to the next), those that share an
// instance taking turns on it. Returns each one's exception; a replica that
// fails releases the others from their meetings.
std::vector<std::exception_ptr> run_as_group(const std::vector<std::function<void()>>& tasks,
                                             const std::vector<Device>& devices) {
  const size_t n = tasks.size();
  ReplicaGroup group(static_cast<int>(n));
  std::vector<std::exception_ptr> errors(n);
  std::vector<int> first_to_fail;
  std::mutex failures;
  std::vector<std::function<void()>> members;
  members.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    members.emplace_back([&, i] {
      try {
        ReplicaGroup::Scope scope(&group, static_cast<int>(i), devices[i].instance_id());
        tasks[i]();
      } catch (...) {
        errors[i] = std::current_exception();
        std::lock_guard<std::mutex> lock(failures);
        first_to_fail.push_back(static_cast<int>(i));
        group.fail(fmt::format("replica {} on {} failed", i, devices[i].str()));
      }
    });
  }
  Runtime::get().device_threads().run_together(members);
  // Report the replica that failed first, not the ones it released.
  if (!first_to_fail.empty()) {
    std::vector<std::exception_ptr> only(n);
    only[static_cast<size_t>(first_to_fail.front())] =
        errors[static_cast<size_t>(first_to_fail.front())];
    return only;
  }
  return errors;
}

}  // namespace

bool synchronizes_replicas(const nn::Module& module) {
  for (const auto& [name, m] : module.named_modules()) {
    if (m->synchronizes_replicas()) return true;
  }
  return false;
}

std::vector<Tensor> parallel_apply(const std::vector<std::shared_ptr<nn::Module>>& replicas,
                                   const std::vector<nn::TensorList>& inputs,
                                   const std::vector<Device>& devices) {
  KDP_CHECK(replicas.size() == inputs.size() && replicas.size() <= devices.size(), ValueError,
            "{} replicas, {} inputs and {} devices", replicas.size(), inputs.size(),
            devices.size());
  const size_t n = replicas.size();
  std::vector<Tensor> outputs(n);
  const ExecutionContext context = ExecutionContext::current();
  std::vector<std::function<void()>> tasks;
  tasks.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    tasks.emplace_back([&, i] {
      ExecutionScope scope(context);
      outputs[i] = replicas[i]->forward(inputs[i]);
    });
  }
  const std::vector<Device> used(devices.begin(), devices.begin() + static_cast<long>(n));
  const bool concurrent = Runtime::get().devices_concurrent(static_cast<int>(devices.size()));
  const auto errors = n > 1 && synchronizes_replicas(*replicas[0])
                          ? run_as_group(tasks, used)
                          : Runtime::get().device_threads().run(tasks, used, concurrent);
  for (size_t i = 0; i < n; ++i) {
    if (errors[i]) {
      rethrow_in_context(errors[i], fmt::format("in replica {} on {}: ", i, used[i].str()));
    }
  }
  return outputs;
}

std::vector<Tensor> parallel_apply(const std::vector<std::shared_ptr<nn::Module>>& replicas,
                                   const std::vector<Tensor>& inputs,
                                   const std::vector<Device>& devices) {
  std::vector<nn::TensorList> lists;
  lists.reserve(inputs.size());
  for (const Tensor& t : inputs) lists.push_back({t});
  return parallel_apply(replicas, lists, devices);
}

}  // namespace kdp

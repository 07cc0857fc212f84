#pragma once
/// \file
/// RunDirectoryError: a run may not start as asked because it would take over
/// or destroy files another run (or an earlier part of this one) wrote. The
/// Trainer throws it on every rank with the same text, before it writes
/// anything; drivers print it once and exit with status 1.

#include <string>

#include "kdp/core/error.hpp"

namespace kdp::io {

/// Starting would take over or destroy another run's files, or another run is
/// using them now.
class RunDirectoryError : public StateError {
 public:
  enum class Reason {
    OtherConfiguration,              // the directory records other settings
    CheckpointOfOtherConfiguration,  // the checkpoint to resume from records other settings
    HoldsThisRun,                    // a fresh start would overwrite this run's checkpoints
    NothingToResume,                 // checkpoints exist and none can be resumed from
    WouldFork,          // the checkpoint to resume from is older than the directory's newest
    MetricsFileExists,  // a fresh start would truncate an existing metrics file
    InUse,              // another run holds the directory's or the metrics file's lock
    CannotLock,         // the file system cannot lock them
    NotKdpFile,         // the metrics file or run.json is not kdp's: it is never written
  };

  /// `summary`: one line; `details`: the lines that explain it (a table of
  /// settings, the checkpoints and why each is unusable); `way_out`: what to do.
  /// what() reads "kdp::train: summary", then the details and the way out.
  RunDirectoryError(Reason reason, std::string summary, std::string details, std::string way_out)
      : StateError("kdp::train", summary + "\n" + details + way_out),
        reason_(reason),
        summary_(std::move(summary)),
        details_(std::move(details)),
        way_out_(std::move(way_out)) {}

  Reason reason() const { return reason_; }
  const std::string& summary() const { return summary_; }
  const std::string& details() const { return details_; }
  const std::string& way_out() const { return way_out_; }

 private:
  Reason reason_;
  std::string summary_, details_, way_out_;
};

}  // namespace kdp::io

// The one rule for the files kdp writes: unwritable paths refused, files of
// another kind never replaced, kdp's own replaced only when asked.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include "../temp_dir.hpp"
#include "kdp/kdp.hpp"

using namespace kdp;
using kdp::test::TempDir;

namespace {

std::string contents_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

std::string refusal(const std::string& path, const io::OutputKind& kind, bool replace) {
  try {
    io::claim_output(path, kind, replace, "test");
  } catch (const IOError& e) {
    return e.message();
  }
  return "";
}

}  // namespace

TEST(OutputFile, ANewPathIsClaimedAndNothingIsLeftBehind) {
  TempDir dir;
  EXPECT_FALSE(io::claim_output(dir.file("run.json"), io::OutputKind::trace(), false, "test"));
  EXPECT_TRUE(dir.entries().empty());  // the probe of the directory is gone
}

TEST(OutputFile, KdpsOwnFileIsReplacedOnlyWhenAsked) {
  TempDir dir;
  const std::string status = dir.file("status");
  write(status, "75\n");
  EXPECT_NE(refusal(status, io::OutputKind::status(), false).find("exists; name another file"),
            std::string::npos);
  EXPECT_TRUE(io::claim_output(status, io::OutputKind::status(), true, "test"));
  const std::string trace = dir.file("t.json");
  write(trace, std::string(io::kTracePrefix) + "},\"traceEvents\":[]}\n");
  EXPECT_TRUE(io::claim_output(trace, io::OutputKind::trace(), true, "test"));
  EXPECT_EQ(io::describe_path(trace), "a kdp trace (JSON)");
}

TEST(OutputFile, AFileOfAnotherKindIsNeverReplaced) {
  TempDir dir;
  const std::string notes = dir.file("notes.txt");
  write(notes, "my notes\n");
  const std::string json = dir.file("other.json");
  write(json, "{\"traceEvents\":[]}\n");  // a Chrome trace, but not kdp's
  const std::string number = dir.file("count");
  write(number, "12345\n");  // more digits than an exit status
  for (const std::string& path : {notes, json, number}) {
    for (const io::OutputKind& kind : {io::OutputKind::trace(), io::OutputKind::status(),
                                       io::OutputKind::plot(), io::OutputKind::checkpoint()}) {
      const std::string before = contents_of(path);
      EXPECT_THROW(io::claim_output(path, kind, true, "test"), io::ForeignFileError)
          << path << " as a " << kind.name;
      EXPECT_EQ(contents_of(path), before);
    }
  }
  EXPECT_NE(refusal(notes, io::OutputKind::trace(), true)
                .find("is a text file, not a kdp trace file: kdp never replaces it"),
            std::string::npos)
      << refusal(notes, io::OutputKind::trace(), true);
  EXPECT_EQ(io::describe_path(json), "a JSON file");
}

TEST(OutputFile, APathKdpCannotWriteIsRefusedAsUnwritable) {
  TempDir dir;
  EXPECT_NE(refusal(dir.file("none/run.json"), io::OutputKind::trace(), true)
                .find("its directory '" + dir.file("none") + "' does not exist"),
            std::string::npos);
  EXPECT_NE(refusal(dir.path().string(), io::OutputKind::trace(), true).find("it is a directory"),
            std::string::npos);
  // /proc takes no new files (and its files are not kdp's): unwritable comes first.
  EXPECT_NE(refusal("/proc/version", io::OutputKind::trace(), true)
                .find("cannot write the trace file '/proc/version': its directory '/proc' takes "
                      "no new files"),
            std::string::npos)
      << refusal("/proc/version", io::OutputKind::trace(), true);
}

TEST(OutputFile, CheckpointsAreKnownByTheirFormat) {
  TempDir dir;
  nn::Linear model(2, 3);
  optim::SGD opt(model.named_parameters(), optim::SGDOptions{});
  const std::string ckpt = dir.file("c.h5");
  io::save_checkpoint(ckpt, model, opt, io::TrainingState{});
  EXPECT_EQ(io::describe_path(ckpt), "a kdp checkpoint (HDF5)");
  EXPECT_TRUE(io::claim_output(ckpt, io::OutputKind::checkpoint(), true, "test"));
  EXPECT_THROW(io::claim_output(ckpt, io::OutputKind::dataset(), true, "test"),
               io::ForeignFileError);
  // save_checkpoint replaces a checkpoint, never anything else.
  const std::string notes = dir.file("notes.h5");
  write(notes, "not HDF5\n");
  EXPECT_THROW(io::save_checkpoint(notes, model, opt, io::TrainingState{}), io::ForeignFileError);
  EXPECT_EQ(contents_of(notes), "not HDF5\n");
}

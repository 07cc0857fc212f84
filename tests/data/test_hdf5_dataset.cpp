#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <set>

#include "io/hdf5.hpp"
#include "temp_dir.hpp"
#include "test_util.hpp"

using namespace kdp;
namespace fs = std::filesystem;

namespace {

// Files under one directory for the whole run, removed when the binary exits,
// also where a test fails before its own clean-up.
std::string temp_file(const std::string& name) {
  static const kdp::test::TempDir dir;
  return dir.file(name);
}

// 30 samples of [2, 3] uint8 where every pixel of sample i is i, labels i % 4.
std::string make_file(const std::string& name) {
  const std::string path = temp_file(name);
  io::h5::File f = io::h5::File::create(path);
  io::h5::Group g = f.create_group("train");
  std::vector<uint8_t> img(30 * 6);
  std::vector<uint8_t> lab(30);
  for (int i = 0; i < 30; ++i) {
    for (int p = 0; p < 6; ++p) img[static_cast<size_t>(i * 6 + p)] = static_cast<uint8_t>(i);
    lab[static_cast<size_t>(i)] = static_cast<uint8_t>(i % 4);
  }
  g.create_dataset("images", io::h5::Type::UInt8, {30, 2, 3}, 8, 1).write_all(img.data());
  g.create_dataset("labels", io::h5::Type::UInt8, {30}).write_all(lab.data());
  g.set_attribute("num_classes", int64_t{4});
  return path;
}

}  // namespace

TEST(HDF5Dataset, ReadsOnlyTheRequestedRowsInTheRequestedOrder) {
  const std::string path = make_file("order.h5");
  data::HDF5DatasetOptions o;
  o.scale = false;
  o.cache_bytes = 100;  // less than the dataset: only needed blocks are read
  data::HDF5Dataset ds(path, "train", o);
  EXPECT_EQ(ds.size(), 30);
  EXPECT_EQ(ds.num_classes(), 4);
  const std::vector<int64_t> idx = {21, 5, 6, 3, 7, 20, 6};
  std::vector<float> f(idx.size() * 6), l(idx.size());
  ds.fetch(idx, f.data(), l.data());
  for (size_t k = 0; k < idx.size(); ++k) {
    EXPECT_EQ(f[k * 6], static_cast<float>(idx[k]));
    EXPECT_EQ(f[k * 6 + 5], static_cast<float>(idx[k]));
    EXPECT_EQ(l[k], static_cast<float>(idx[k] % 4));
  }
  // Chunks of 8 rows: rows 3..7 lie in block 0, rows 20 and 21 in block 2, so
  // two reads; the same rows again come from the cache.
  EXPECT_EQ(ds.block_rows(), 8);
  EXPECT_EQ(ds.last_read_runs(), 2);
  ds.fetch(idx, f.data(), l.data());
  EXPECT_EQ(ds.last_read_runs(), 0);
  ds.fetch({8, 9, 16}, f.data(), l.data());  // blocks 1 and 2: block 1 only is new
  EXPECT_EQ(ds.last_read_runs(), 1);
  EXPECT_EQ(f[2 * 6], 16.0f);

  // With room for all of it, the missing blocks between needed ones come too.
  o.cache_bytes = 1 << 20;
  data::HDF5Dataset roomy(path, "train", o);
  roomy.fetch({1, 25}, f.data(), l.data());
  EXPECT_EQ(roomy.last_read_runs(), 1);  // blocks 0..3 in one read
  roomy.fetch({9, 17}, f.data(), l.data());
  EXPECT_EQ(roomy.last_read_runs(), 0);
  EXPECT_EQ(f[0], 9.0f);
  fs::remove(path);
}

TEST(HDF5Dataset, ScalesStandardisesAndFlattens) {
  const std::string path = make_file("norm.h5");
  data::HDF5DatasetOptions o;
  o.mean = 0.5f;
  o.stddev = 0.25f;
  o.flatten = true;
  data::HDF5Dataset ds(path, "train", o);
  EXPECT_EQ(ds.sample_shape(), Shape({6}));
  std::vector<float> f(6), l(1);
  ds.fetch({51 % 30}, f.data(), l.data());
  EXPECT_FLOAT_EQ(f[0], (21.0f / 255.0f - 0.5f) / 0.25f);
  fs::remove(path);
}

TEST(HDF5Dataset, BadFilesAndDatasetsAreReported) {
  auto expect = [](const std::function<void()>& f, const std::string& part) {
    try {
      f();
      FAIL() << "expected an error mentioning " << part;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  expect([] { data::HDF5Dataset("/nonexistent/data.h5", "train"); }, "/nonexistent/data.h5");
  const std::string path = make_file("bad.h5");
  expect([&] { data::HDF5Dataset(path, "/train/pixels", "/train/labels"); }, "/train/pixels");
  {
    io::h5::File f = io::h5::File::open(path, io::h5::File::Mode::ReadWrite);
    io::h5::Group g = f.open_group("train");
    std::vector<uint8_t> short_labels(29, 0);
    g.create_dataset("short_labels", io::h5::Type::UInt8, {29}).write_all(short_labels.data());
    std::vector<uint8_t> big(30, 9);
    g.create_dataset("big_labels", io::h5::Type::UInt8, {30}).write_all(big.data());
    std::vector<float> nan(30 * 2, 1.0f);
    nan[7] = std::nanf("");  // sample 3
    g.create_dataset("nan_images", io::h5::Type::Float32, {30, 2}).write_all(nan.data());
    // Samples of 6 dimensions: a batch of them would need 7.
    std::vector<float> deep(30 * 64, 1.0f);
    g.create_dataset("deep_images", io::h5::Type::Float32, {30, 1, 2, 2, 2, 2, 2})
        .write_all(deep.data());
  }
  expect([&] { data::HDF5Dataset(path, "/train/deep_images", "/train/labels"); },
         "samples of '/train/deep_images' in '" + path + "' are [1, 2, 2, 2, 2, 2]");
  expect([&] { data::HDF5Dataset(path, "/train/images", "/train/short_labels"); },
         "has 30 samples but '/train/short_labels' has 29 labels");
  expect([&] { data::HDF5Dataset(path, "/train/images", "/train/big_labels"); },
         "label 9 of sample 0");
  {
    data::HDF5Dataset nan_ds(path, "/train/nan_images", "/train/labels");
    std::vector<float> f(4), l(2);
    EXPECT_THROW(nan_ds.fetch({3, 4}, f.data(), l.data()), NumericalError);
    expect([&] { nan_ds.fetch({3}, f.data(), l.data()); }, "sample 3");
    expect([&] { nan_ds.fetch({30}, f.data(), l.data()); }, "index 30");
  }

  // A header claiming 2^40 samples that the file does not hold is refused
  // before anything is allocated for it.
  {
    io::h5::File f = io::h5::File::open(path, io::h5::File::Mode::ReadWrite);
    io::h5::Group g = f.create_group("huge");
    g.create_dataset("images", io::h5::Type::UInt8, {int64_t{1} << 40, 28, 28}, 1024, 1);
    g.create_dataset("labels", io::h5::Type::UInt8, {int64_t{1} << 40}, 1024, 1);
  }
  expect([&] { data::HDF5Dataset(path, "huge"); }, "claims");
  fs::remove(path);
}

TEST(HDF5Dataset, BytesConvertedOnTheDeviceEqualTheHostConversion) {
  // The DataLoader sends byte features as stored and converts them on the
  // device (the default): the batches equal those converted by the prefetch
  // thread (the same bits in host memory, where the same loop makes them),
  // and a quarter of the bytes go up.
  const std::string path = make_file("bytes.h5");
  data::HDF5DatasetOptions o;
  o.mean = 0.05f;
  o.stddev = 0.03f;
  auto ds = std::make_shared<data::HDF5Dataset>(path, "train", o);
  ASSERT_TRUE(ds->byte_features().has_value());
  auto batches = [&](bool on_device, int64_t* bytes_up) {
    data::DataLoaderOptions lo;
    lo.batch_size = 8;
    lo.convert_on_device = on_device;
    data::DataLoader loader(ds, std::make_shared<data::RandomSampler>(ds->size(), 5), lo);
    const int64_t before = Runtime::get().transfers().to_device_bytes;
    std::vector<std::vector<float>> out;
    for (data::Batch& b : loader) {
      EXPECT_EQ(b.features.shape(), (Shape{b.labels.size(0), 2, 3}));
      out.push_back(b.features.to_vector());
      out.push_back(b.labels.to_vector());
    }
    *bytes_up = Runtime::get().transfers().to_device_bytes - before;
    return out;
  };
  int64_t host_bytes = 0, device_bytes = 0;
  const auto on_host = batches(false, &host_bytes);
  const auto on_device = batches(true, &device_bytes);
  ASSERT_EQ(on_host.size(), on_device.size());
  for (size_t i = 0; i < on_host.size(); ++i) {
    if (compat::host_accessible_memory()) {
      EXPECT_EQ(on_device[i], on_host[i]) << "batch " << i / 2;
    } else {
      test::expect_close(on_device[i], on_host[i], 1e-6, 1e-6);
    }
  }
  const int64_t labels_bytes = 30 * 4;
  EXPECT_EQ(host_bytes, 30 * 6 * 4 + labels_bytes);
  EXPECT_EQ(device_bytes, 30 * 6 + labels_bytes);
  fs::remove(path);
}

// Float targets of any shape are a regression's: read as they are, batched
// with their shape, no classes; a NaN among them is refused at open, naming the
// sample.
TEST(HDF5Dataset, FloatTargetsOfAnyShape) {
  const std::string path = temp_file("regression.h5");
  {
    io::h5::File f = io::h5::File::create(path);
    io::h5::Group g = f.create_group("fields");
    std::vector<float> x(10 * 4), y(10 * 2 * 3), bad(10, 0.5f);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) * 0.25f;
    for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<float>(i) - 7.5f;
    bad[6] = std::nanf("");
    g.create_dataset("inputs", io::h5::Type::Float32, {10, 4}).write_all(x.data());
    g.create_dataset("targets", io::h5::Type::Float32, {10, 2, 3}).write_all(y.data());
    g.create_dataset("nan_targets", io::h5::Type::Float32, {10}).write_all(bad.data());
  }
  data::HDF5Dataset ds(path, "/fields/inputs", "/fields/targets");
  EXPECT_EQ(ds.num_classes(), 0);
  EXPECT_EQ(ds.label_shape(), (Shape{2, 3}));
  std::vector<float> features(2 * 4), targets(2 * 6);
  ds.fetch({7, 2}, features.data(), targets.data());
  for (int j = 0; j < 6; ++j) {
    EXPECT_EQ(targets[static_cast<size_t>(j)], static_cast<float>(7 * 6 + j) - 7.5f);
    EXPECT_EQ(targets[static_cast<size_t>(6 + j)], static_cast<float>(2 * 6 + j) - 7.5f);
  }
  try {
    data::HDF5Dataset nan(path, "/fields/inputs", "/fields/nan_targets");
    FAIL() << "a NaN target was taken";
  } catch (const IOError& e) {
    EXPECT_NE(std::string(e.what()).find("of sample 6 in '/fields/nan_targets'"), std::string::npos)
        << e.what();
  }
}

namespace {
// A little-endian 16-bit float type with an exponent and a mantissa of these
// widths (5, 10, bias 15: IEEE half, numpy's float16; 8, 7, bias 127:
// bfloat16), for files of such numbers; the caller closes it.
hid_t sixteen_bit_float(size_t exponent, size_t mantissa, size_t bias) {
  const hid_t t = H5Tcopy(H5T_IEEE_F32LE);
  H5Tset_fields(t, 15, mantissa, exponent, 0, mantissa);
  H5Tset_size(t, 2);
  H5Tset_ebias(t, bias);
  H5Tset_precision(t, 16);
  return t;
}
}  // namespace

// Features of every numeric type scientists store, as the same floats
// converted on the host or handed over as stored and converted on the device
// (float64 rounded as read, so floats cross); 64-bit integers are refused
// with the type named.
TEST(HDF5Dataset, FeaturesOfEveryNumericType) {
  const std::string path = temp_file("dtypes.h5");
  // float16 as h5py and numpy store it: IEEE half precision.
  const hid_t half = sixteen_bit_float(5, 10, 15);
  // (Added one by one: nvcc's front end misreads HDF5's type macros, comma
  // expressions, inside a braced list.)
  std::vector<std::pair<std::string, hid_t>> types;
  types.emplace_back("int8", H5T_STD_I8LE);
  types.emplace_back("uint16", H5T_STD_U16LE);
  types.emplace_back("int16", H5T_STD_I16LE);
  types.emplace_back("int32", H5T_STD_I32LE);
  types.emplace_back("uint32", H5T_STD_U32LE);
  types.emplace_back("float16", half);
  types.emplace_back("float64", H5T_IEEE_F64LE);
  types.emplace_back("int64", H5T_STD_I64LE);
  std::vector<float> values(6 * 2 * 3);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) - 10.0f;
  {
    io::h5::File f = io::h5::File::create(path);
    std::vector<int64_t> labels = {0, 1, 2, 0, 1, 2};
    f.create_dataset("labels", io::h5::Type::Int64, {6}).write_all(labels.data());
    const hsize_t dims[3] = {6, 2, 3};
    for (const auto& [name, type] : types) {
      std::vector<float> stored = values;
      if (name[0] == 'u') {
        for (float& v : stored) v += 10.0f;  // unsigned: 0..35
      }
      const hid_t space = H5Screate_simple(3, dims, nullptr);
      const hid_t d =
          H5Dcreate2(f.id(), name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
      ASSERT_GE(d, 0) << name;
      ASSERT_GE(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, stored.data()), 0);
      H5Dclose(d);
      H5Sclose(space);
    }
  }
  H5Tclose(half);
  for (const auto& [name, type] : types) {
    if (name == "int64") {
      try {
        data::HDF5Dataset ds(path, "/" + name, "/labels");
        ADD_FAILURE() << "int64 features were taken";
      } catch (const IOError& e) {
        EXPECT_NE(std::string(e.what()).find("holds int64"), std::string::npos) << e.what();
      }
      continue;
    }
    auto ds = std::make_shared<data::HDF5Dataset>(path, "/" + name, "/labels");
    EXPECT_EQ(ds->feature_type(), name);
    EXPECT_EQ(ds->sample_shape(), (Shape{2, 3}));
    std::vector<float> got(6 * 6), labels(6);
    ds->fetch({0, 1, 2, 3, 4, 5}, got.data(), labels.data());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i], values[i] + (name[0] == 'u' ? 10.0f : 0.0f)) << name << " value " << i;
    }
    // Converted on the device: the same features, from the numbers as stored
    // (float64 is converted on the host: half the bytes cross).
    const std::optional<data::ByteFeatures> how = ds->byte_features();
    ASSERT_EQ(how.has_value(), name != "float64") << name;
    const int64_t stored = how ? data::stored_bytes(how->type) : 4;  // else floats cross
    if (how) {
      EXPECT_EQ(stored, std::stoi(name.substr(name.find_first_of("0123456789"))) / 8);
    }
    data::DataLoaderOptions lo;
    lo.batch_size = 6;
    lo.convert_on_device = true;
    data::DataLoader loader(ds, std::make_shared<data::SequentialSampler>(6), lo);
    const int64_t before = Runtime::get().transfers().to_device_bytes;
    for (data::Batch& b : loader) EXPECT_EQ(b.features.to_vector(), got) << name;
    EXPECT_EQ(Runtime::get().transfers().to_device_bytes - before, 36 * stored + 6 * 4) << name;
  }
}

// A NaN among float16 features is refused whether they are converted on the
// host or handed over as stored for the device; a 16-bit float that is not
// IEEE half (bfloat16) is refused at open, named.
TEST(HDF5Dataset, NonFiniteHalvesAndOtherSixteenBitFloatsAreRefused) {
  const std::string path = temp_file("halves.h5");
  const hid_t half = sixteen_bit_float(5, 10, 15);
  const hid_t bf16 = sixteen_bit_float(8, 7, 127);
  {
    io::h5::File f = io::h5::File::create(path);
    std::vector<int64_t> labels = {0, 1, 0, 1};
    f.create_dataset("labels", io::h5::Type::Int64, {4}).write_all(labels.data());
    std::vector<float> values = {1, 2, 3, 4, 5, std::nanf(""), 7, 8};
    const hsize_t dims[2] = {4, 2};
    for (const auto& [name, type] : {std::pair{"half", half}, std::pair{"bf16", bf16}}) {
      const hid_t space = H5Screate_simple(2, dims, nullptr);
      const hid_t d = H5Dcreate2(f.id(), name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
      ASSERT_GE(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
      H5Dclose(d);
      H5Sclose(space);
    }
  }
  H5Tclose(half);
  H5Tclose(bf16);
  data::HDF5Dataset ds(path, "/half", "/labels");
  std::vector<float> x(4), y(2);
  std::vector<uint8_t> raw(8);
  ds.fetch({0, 1}, x.data(), y.data());  // samples 0 and 1 are finite
  EXPECT_EQ(x, (std::vector<float>{1, 2, 3, 4}));
  for (bool as_stored : {false, true}) {
    try {
      if (as_stored) {
        ds.fetch_bytes({3, 2}, raw.data(), y.data());
      } else {
        ds.fetch({3, 2}, x.data(), y.data());
      }
      ADD_FAILURE() << "a NaN feature was taken, as_stored " << as_stored;
    } catch (const NumericalError& e) {
      EXPECT_NE(std::string(e.what()).find("sample 2 of '/half'"), std::string::npos) << e.what();
    }
  }
  try {
    data::HDF5Dataset other(path, "/bf16", "/labels");
    ADD_FAILURE() << "bfloat16 features were taken as float16";
  } catch (const IOError& e) {
    EXPECT_NE(std::string(e.what()).find("holds bfloat16"), std::string::npos) << e.what();
  }
  fs::remove(path);
}

// float16 features become floats as HDF5 converts them, for every one of the
// 65536 half-precision numbers (NaNs stay NaNs).
TEST(HDF5Dataset, HalfPrecisionAsHDF5ConvertsIt) {
  const hid_t half = sixteen_bit_float(5, 10, 15);
  std::vector<uint16_t> bits(65536);
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = static_cast<uint16_t>(i);
  std::vector<float> want(bits.size());
  std::memcpy(want.data(), bits.data(), bits.size() * sizeof(uint16_t));  // converted in place
  ASSERT_GE(H5Tconvert(half, H5T_NATIVE_FLOAT, want.size(), want.data(), nullptr, H5P_DEFAULT), 0);
  H5Tclose(half);
  const auto* raw = reinterpret_cast<const unsigned char*>(bits.data());
  for (size_t i = 0; i < bits.size(); ++i) {
    const float got = data::stored_value(raw, static_cast<int64_t>(i), data::StoredType::Float16);
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got)) << "half 0x" << std::hex << i;
    } else {
      EXPECT_EQ(got, want[i]) << "half 0x" << std::hex << i;
    }
  }
}

// A run's parts: one set of samples with a tenth held out (every sample in one
// part), a validation file, and what cannot be one run's samples.
TEST(Splits, HeldOutOrFromAnotherFileAndRefusedWhenTheyDiffer) {
  const std::string path = make_file("splits.h5"), other = make_file("splits-val.h5");
  data::HDF5DatasetOptions o;
  o.scale = false;
  data::SplitSpec spec;
  spec.file = path;
  spec.inputs = "/train/images";
  spec.targets = "/train/labels";
  spec.seed = 5;
  const data::Splits held = data::open_splits(spec, o);
  EXPECT_EQ(held.train->size(), 27);
  EXPECT_EQ(held.val->size(), 3);
  std::set<float> seen;
  for (const auto& part : {held.train, held.val}) {
    for (int64_t i = 0; i < part->size(); ++i) {
      std::vector<float> x(6), y(1);
      part->fetch({i}, x.data(), y.data());
      seen.insert(x[0]);  // every pixel of sample i is i
    }
  }
  EXPECT_EQ(seen.size(), 30u);
  EXPECT_NE(held.val_name.find("held out of '/train/images'"), std::string::npos) << held.val_name;
  // Names in groups: the validation file's /test (absent here: refused naming it).
  spec.inputs = "images";
  spec.targets = "labels";
  spec.val_file = other;
  try {
    data::open_splits(spec, o);
    ADD_FAILURE() << "a missing /test was taken";
  } catch (const IOError& e) {
    EXPECT_NE(std::string(e.what()).find("/test/images"), std::string::npos) << e.what();
  }
  spec.inputs = "/train/images";
  spec.targets = "/train/labels";
  const data::Splits two = data::open_splits(spec, o);
  EXPECT_EQ(two.train->size(), 30);
  EXPECT_EQ(two.val->size(), 30);
  spec.val_fraction = 0.2;
  EXPECT_THROW(data::open_splits(spec, o), ValueError);  // two ways to validate
  spec.val_file.clear();
  spec.val_fraction = 1.0;
  EXPECT_THROW(data::open_splits(spec, o), ValueError);
}

// Files of one run as one dataset (a glob, in name order): every sample of
// every file once, in order; a file of another kind refused naming it; a
// pattern that matches nothing named.
TEST(Splits, ManyFilesAsOneDataset) {
  const std::string dir = temp_file("many");
  fs::create_directories(dir);
  for (const char* name : {"run-0.h5", "run-1.h5"}) {
    fs::copy_file(make_file("many-part.h5"), dir + "/" + name,
                  fs::copy_options::overwrite_existing);
  }
  data::HDF5DatasetOptions o;
  o.scale = false;
  data::SplitSpec spec;
  spec.file = dir + "/run-*.h5";
  spec.inputs = "/train/images";
  spec.targets = "/train/labels";
  spec.val_fraction = 0.1;
  const data::Splits s = data::open_splits(spec, o);
  EXPECT_EQ(s.files, (std::vector<std::string>{dir + "/run-0.h5", dir + "/run-1.h5"}));
  EXPECT_EQ(s.train->size() + s.val->size(), 60);
  EXPECT_NE(s.train_name.find("of 2 files"), std::string::npos) << s.train_name;
  // The whole: samples 0..29 of each file in turn (every pixel of sample i is i).
  auto whole = std::make_shared<data::ConcatDataset>(
      std::vector<std::shared_ptr<const data::Dataset>>{
          std::make_shared<data::HDF5Dataset>(dir + "/run-0.h5", "train", o),
          std::make_shared<data::HDF5Dataset>(dir + "/run-1.h5", "train", o)},
      std::vector<std::string>{"run-0.h5", "run-1.h5"});
  std::vector<float> x(3 * 6), y(3);
  whole->fetch({45, 2, 31}, x.data(), y.data());
  EXPECT_EQ(x[0], 15.0f);
  EXPECT_EQ(x[6], 2.0f);
  EXPECT_EQ(x[12], 1.0f);
  EXPECT_EQ(y[0], 15.0f - 12.0f);  // labels i % 4
  std::vector<uint8_t> bytes(6);
  whole->fetch_bytes({59}, bytes.data(), y.data());
  EXPECT_EQ(bytes[0], 29);
  // A file of another shape, or of the same shape stored as another type.
  for (const Shape& shape : {Shape{30, 5}, Shape{30, 2, 3}}) {
    {
      io::h5::File odd = io::h5::File::create(dir + "/run-2.h5");
      io::h5::Group g = odd.create_group("train");
      std::vector<float> img(static_cast<size_t>(shape.numel()), 1.0f);
      std::vector<uint8_t> lab(30, 0);
      g.create_dataset("images", io::h5::Type::Float32, shape.to_vector()).write_all(img.data());
      g.create_dataset("labels", io::h5::Type::UInt8, {30}).write_all(lab.data());
    }
    try {
      data::open_splits(spec, o);
      ADD_FAILURE() << "a file of another kind was taken";
    } catch (const ValueError& e) {
      const std::string want = shape.rank() == 2 ? "run-2.h5' holds float32 samples [5]"
                                                 : "run-2.h5' holds float32 samples [2, 3]";
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("holds uint8 samples [2, 3]"), std::string::npos)
          << e.what();
    }
  }
  spec.file = dir + "/none-*.h5";
  try {
    data::open_splits(spec, o);
    ADD_FAILURE() << "an empty pattern was taken";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("matches no file"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

#include <gtest/gtest.h>

#include <string>

#include "core/check.hpp"

// Functions of every kind a check stands in, each returning the origin a
// failing KDP_CHECK there would name.
namespace kdp::probe {

using kdp::detail::origin_of;

std::string free_function(int) {
  return origin_of(__PRETTY_FUNCTION__);
}

struct Widget {
  Widget() : made_in(origin_of(__PRETTY_FUNCTION__)) {}
  std::string method() const { return origin_of(__PRETTY_FUNCTION__); }
  std::string named(const std::string& type) const { return KDP_ORIGIN_NAMED(type); }
  template <class T>
  std::string templated(T) const {
    return origin_of(__PRETTY_FUNCTION__);
  }
  std::string operator()(int) const { return origin_of(__PRETTY_FUNCTION__); }
  std::string made_in;
};

namespace {
std::string hidden() {
  return origin_of(__PRETTY_FUNCTION__);
}
std::string named_in_helper(const char* name) {
  return KDP_ORIGIN_NAMED(name);
}
}  // namespace

std::string named_in_function(const std::string& name) {
  return KDP_ORIGIN_NAMED(name);
}

namespace detail {
std::string internal() {
  return origin_of(__PRETTY_FUNCTION__);
}
}  // namespace detail

std::string in_lambda() {
  const auto f = [](int) { return origin_of(__PRETTY_FUNCTION__); };
  return f(0);
}

const char* pointer_result(const char* p) {
  static std::string origin;
  origin = origin_of(__PRETTY_FUNCTION__);
  return p != nullptr ? origin.c_str() : nullptr;
}

void refuse(int n) {
  KDP_CHECK(n >= 1, ValueError, "asked for {} devices; need at least 1", n);
}

void refuse_for(const std::string& op, int n) {
  KDP_CHECK_FOR(op, n >= 1, ShapeError, "size {}", n);
}

[[noreturn]] void fail() {
  KDP_FAIL(StateError, "always {}", 1);
}

}  // namespace kdp::probe

using namespace kdp;

TEST(Check, OriginIsTheFunctionTheCheckStandsIn) {
  EXPECT_EQ(probe::free_function(1), "kdp::probe::free_function");
  const probe::Widget w;
  EXPECT_EQ(w.made_in, "kdp::probe::Widget") << "a constructor is named as its class";
  EXPECT_EQ(w.method(), "kdp::probe::Widget::method");
  EXPECT_EQ(w.templated(2.5), "kdp::probe::Widget::templated");
  EXPECT_EQ(w(1), "kdp::probe::Widget::operator()");
  EXPECT_EQ(probe::hidden(), "kdp::probe::hidden") << "without the anonymous namespace";
  EXPECT_EQ(probe::detail::internal(), "kdp::probe::internal") << "without detail::";
  EXPECT_EQ(probe::in_lambda(), "kdp::probe::in_lambda") << "a lambda: the function it is in";
  EXPECT_EQ(std::string(probe::pointer_result("x")), "kdp::probe::pointer_result");
}

// The compilers' own spellings of an anonymous namespace, as their
// __PRETTY_FUNCTION__ gives them: GCC's, Clang's, and nvcc's front end's
// (named after the file and a hash).
TEST(Check, EveryCompilersAnonymousNamespaceIsLeftOut) {
  for (const char* pretty : {"std::string kdp::probe::{anonymous}::hidden()",
                             "std::string kdp::probe::(anonymous namespace)::hidden()",
                             "std::string kdp::probe::_GLOBAL__N__fc9a3835_14_test_check_cpp_"
                             "0fa94d8a::hidden()"}) {
    EXPECT_EQ(detail::origin_of(pretty), "kdp::probe::hidden") << pretty;
  }
  // A name that only begins like one of them stays.
  EXPECT_EQ(detail::origin_of("void kdp::detailed::run()"), "kdp::detailed::run");
  EXPECT_EQ(detail::origin_of("void kdp::_GLOBAL_run()"), "kdp::_GLOBAL_run");
}

TEST(Check, ANamedOriginTakesTheNamespacesOfTheFunction) {
  EXPECT_EQ(probe::named_in_function("SGD"), "kdp::probe::SGD");
  const probe::Widget w;
  EXPECT_EQ(w.named("Conv2d"), "kdp::probe::Conv2d") << "a method's class is not a namespace";
  EXPECT_EQ(probe::named_in_helper("NpyReader"), "kdp::probe::NpyReader")
      << "without the anonymous namespace";
  EXPECT_EQ(detail::origin_namespace_of("void f(int)"), "") << "no namespace";
  EXPECT_EQ(detail::origin_namespace_of("void kdp::data::detail::g()"), "kdp::data::");
}

TEST(Check, AFailingCheckNamesItsOriginAndFormatsItsMessage) {
  EXPECT_NO_THROW(probe::refuse(1));
  try {
    probe::refuse(0);
    FAIL() << "KDP_CHECK let 0 through";
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(), "kdp::probe::refuse: asked for 0 devices; need at least 1");
  }
  try {
    probe::refuse_for("kdp::linear", -2);
    FAIL() << "KDP_CHECK_FOR let -2 through";
  } catch (const ShapeError& e) {
    EXPECT_STREQ(e.what(), "kdp::linear: size -2");
  }
  EXPECT_THROW(probe::fail(), StateError);
}

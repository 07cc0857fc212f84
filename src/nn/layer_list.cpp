#include "kdp/nn/layer_list.hpp"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <map>

#include "kdp/core/closest_name.hpp"
#include "kdp/core/error.hpp"
#include "kdp/nn/activation.hpp"
#include "kdp/nn/batch_norm.hpp"
#include "kdp/nn/conv.hpp"
#include "kdp/nn/linear.hpp"
#include "kdp/nn/parameter_memory.hpp"
#include "kdp/nn/pooling.hpp"
#include "kdp/ops/size2.hpp"

namespace kdp::nn {

namespace {

// What each word takes: the least and most arguments, and whether they are
// probabilities (else whole numbers).
struct Grammar {
  size_t least, most;
  bool probability;
};
const std::map<std::string, Grammar>& grammar() {
  static const std::map<std::string, Grammar> g = {
      {"conv", {2, 4, false}},       {"batchnorm", {0, 0, false}}, {"relu", {0, 0, false}},
      {"leaky_relu", {0, 0, false}}, {"tanh", {0, 0, false}},      {"sigmoid", {0, 0, false}},
      {"gelu", {0, 0, false}},       {"maxpool", {1, 1, false}},   {"avgpool", {1, 1, false}},
      {"gap", {0, 0, false}},        {"dropout", {1, 1, true}},    {"dropout2d", {1, 1, true}},
      {"flatten", {0, 0, false}},    {"linear", {1, 1, false}},    {"conv1d", {2, 4, false}},
      {"maxpool1d", {1, 1, false}},  {"avgpool1d", {1, 1, false}}, {"conv3d", {2, 4, false}},
      {"maxpool3d", {1, 1, false}},  {"avgpool3d", {1, 1, false}}};
  return g;
}

std::string trim(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

// A layer list's errors name the list and the layer at fault, which is where
// the user looks (kdp-train --model): thrown as they are, with no function.
LayerSpec parse_item(const std::string& item, size_t position, const std::string& text) {
  auto fail = [&](const std::string& why) {
    return ValueError(fmt::format("layer list '{}': layer {} '{}' {}", text, position, item, why));
  };
  LayerSpec spec;
  spec.text = item;
  const size_t open = item.find('(');
  spec.kind = trim(item.substr(0, open));
  auto it = grammar().find(spec.kind);
  if (it == grammar().end()) {
    std::vector<std::string> words;
    for (const auto& [word, g] : grammar()) words.push_back(word);
    const std::string guess = closest_name(spec.kind, words);
    throw fail(fmt::format("is not a layer{} (the layers: {})",
                           guess.empty() ? "" : fmt::format("; did you mean {}?", guess),
                           fmt::join(words, ", ")));
  }
  if (open != std::string::npos) {
    if (item.back() != ')') throw fail("has no closing parenthesis");
    const std::string inside = item.substr(open + 1, item.size() - open - 2);
    size_t start = 0;
    while (start <= inside.size()) {
      const size_t comma = inside.find(',', start);
      const std::string number = trim(inside.substr(start, comma - start));
      char* end = nullptr;
      const double v = std::strtod(number.c_str(), &end);
      if (number.empty() || end != number.c_str() + number.size() || !std::isfinite(v)) {
        throw fail(fmt::format("has '{}' where a number belongs", number));
      }
      spec.args.push_back(v);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  const Grammar& g = it->second;
  if (spec.args.size() < g.least || spec.args.size() > g.most) {
    throw fail(
        g.least == g.most
            ? fmt::format("takes {} number(s), got {}", g.least, spec.args.size())
            : fmt::format("takes {} to {} numbers, got {}", g.least, g.most, spec.args.size()));
  }
  for (size_t i = 0; i < spec.args.size(); ++i) {
    const double v = spec.args[i];
    if (g.probability ? !(v >= 0.0 && v < 1.0)
                      : (v != std::floor(v) || v < (i == 3 ? 0 : 1) || v > 1e9)) {
      throw fail(g.probability
                     ? fmt::format("needs a probability in [0, 1), got {}", v)
                     : fmt::format("needs whole numbers >= {}, got {}", i == 3 ? 0 : 1, v));
    }
  }
  return spec;
}

int64_t whole(double v) {
  return static_cast<int64_t>(v);
}

// (As parse_item's: thrown with the layer at fault, not a function.)
[[noreturn]] void does_not_fit(const LayerSpec& l, size_t position, const Shape& in,
                               const std::string& why) {
  throw ShapeError(
      fmt::format("layer {} '{}' does not fit its input {}: {}", position, l.text, in.str(), why));
}

// The layers that slide a window: convolutions and pools over signals (1
// spatial dimension), images (2) and volumes (3).
struct Window {
  int dims;
  bool conv;
};
const std::map<std::string, Window>& windows() {
  static const std::map<std::string, Window> w = {
      {"conv1d", {1, true}}, {"maxpool1d", {1, false}}, {"avgpool1d", {1, false}},
      {"conv", {2, true}},   {"maxpool", {2, false}},   {"avgpool", {2, false}},
      {"conv3d", {3, true}}, {"maxpool3d", {3, false}}, {"avgpool3d", {3, false}}};
  return w;
}

// The sample after a windowed layer: a convolution's (out, k, stride,
// padding) or a pool's (k; stride k) on [channels, spatial...].
Shape window_shape(const LayerSpec& l, const Window& w, size_t position, const Shape& in) {
  static const char* const kinds[] = {"", "signals [channels, length]",
                                      "images [channels, height, width]",
                                      "volumes [channels, depth, height, width]"};
  if (in.rank() != w.dims + 1)
    does_not_fit(l, position, in, fmt::format("it takes {}", kinds[w.dims]));
  const int64_t kernel = whole(w.conv ? l.args[1] : l.args[0]);
  const int64_t stride = w.conv ? (l.args.size() > 2 ? whole(l.args[2]) : 1) : kernel;
  const int64_t pad = w.conv && l.args.size() > 3 ? whole(l.args[3]) : 0;
  std::vector<int64_t> out{w.conv ? whole(l.args[0]) : in[0]};
  for (int i = 1; i <= w.dims; ++i) {
    out.push_back(window_output_size(in[i], kernel, stride, pad));
    if (out.back() < 1) {
      does_not_fit(l, position, in,
                   fmt::format("a window of {} (padding {}) is larger", kernel, pad));
    }
  }
  return Shape(out);
}

// The sample shape after layer `l` of input `in`.
Shape shape_after(const LayerSpec& l, size_t position, const Shape& in) {
  const std::string& k = l.kind;
  auto image = [&] {
    if (in.rank() != 3) does_not_fit(l, position, in, "it takes images [channels, height, width]");
  };
  if (auto w = windows().find(k); w != windows().end())
    return window_shape(l, w->second, position, in);
  if (k == "gap") {
    image();
    return Shape{in[0], 1, 1};
  }
  if (k == "dropout2d") {
    image();
    return in;
  }
  if (k == "batchnorm") {
    if (in.rank() < 1 || in.rank() > 4)
      does_not_fit(l, position, in, "it takes [C], [C, L], [C, H, W] or [C, D, H, W]");
    return in;
  }
  if (k == "flatten") return Shape{in.numel()};
  if (k == "linear") {
    if (in.rank() != 1) {
      does_not_fit(l, position, in,
                   fmt::format("it takes flat samples ([{}]): put flatten before it", in.numel()));
    }
    return Shape{whole(l.args[0])};
  }
  return in;  // activations, dropout
}

std::shared_ptr<Module> make_layer(const LayerSpec& l, const Shape& in, const Device& device) {
  const std::string& k = l.kind;
  if (k == "conv") {
    return std::make_shared<Conv2d>(in[0], whole(l.args[0]), whole(l.args[1]),
                                    l.args.size() > 2 ? whole(l.args[2]) : 1,
                                    l.args.size() > 3 ? whole(l.args[3]) : 0, 1, 1, true, device);
  }
  if (k == "conv1d") {
    return std::make_shared<Conv1d>(in[0], whole(l.args[0]), whole(l.args[1]),
                                    l.args.size() > 2 ? whole(l.args[2]) : 1,
                                    l.args.size() > 3 ? whole(l.args[3]) : 0, 1, 1, true, device);
  }
  if (k == "conv3d") {
    return std::make_shared<Conv3d>(in[0], whole(l.args[0]), whole(l.args[1]),
                                    l.args.size() > 2 ? whole(l.args[2]) : 1,
                                    l.args.size() > 3 ? whole(l.args[3]) : 0, 1, 1, true, device);
  }
  if (k == "maxpool1d") return std::make_shared<MaxPool1d>(whole(l.args[0]));
  if (k == "avgpool1d") return std::make_shared<AvgPool1d>(whole(l.args[0]));
  if (k == "maxpool3d") return std::make_shared<MaxPool3d>(whole(l.args[0]));
  if (k == "avgpool3d") return std::make_shared<AvgPool3d>(whole(l.args[0]));
  if (k == "batchnorm") {
    if (in.rank() == 4) return std::make_shared<BatchNorm3d>(in[0], BatchNormOptions{}, device);
    if (in.rank() == 3) return std::make_shared<BatchNorm2d>(in[0], BatchNormOptions{}, device);
    return std::make_shared<BatchNorm1d>(in[0], BatchNormOptions{}, device);
  }
  if (k == "maxpool") return std::make_shared<MaxPool2d>(whole(l.args[0]));
  if (k == "avgpool") return std::make_shared<AvgPool2d>(whole(l.args[0]));
  if (k == "gap") return std::make_shared<AdaptiveAvgPool2d>(1);
  if (k == "dropout") return std::make_shared<Dropout>(static_cast<float>(l.args[0]));
  if (k == "dropout2d") return std::make_shared<Dropout2d>(static_cast<float>(l.args[0]));
  if (k == "flatten") return std::make_shared<Flatten>();
  if (k == "linear") return std::make_shared<Linear>(in[0], whole(l.args[0]), true, device);
  return make_activation(k);
}

size_t parameter_bytes(const LayerSpec& l, const Shape& in) {
  if (l.kind == "conv")
    return Conv2d::parameter_bytes(in[0], whole(l.args[0]), whole(l.args[1]), 1, true);
  if (l.kind == "conv1d")
    return Conv1d::parameter_bytes(in[0], whole(l.args[0]), whole(l.args[1]), 1, true);
  if (l.kind == "conv3d")
    return Conv3d::parameter_bytes(in[0], whole(l.args[0]), whole(l.args[1]), 1, true);
  if (l.kind == "linear") return Linear::parameter_bytes(in[0], whole(l.args[0]));
  if (l.kind == "batchnorm") return static_cast<size_t>(in[0]) * 2 * sizeof(float);
  return 0;
}

}  // namespace

std::vector<LayerSpec> parse_layer_list(const std::string& text) {
  std::vector<LayerSpec> layers;
  int depth = 0;
  std::string item;
  auto flush = [&] {
    const std::string t = trim(item);
    if (t.empty()) {  // the errors here name the list, as parse_item's
      throw ValueError(fmt::format("layer list '{}': layer {} is empty", text, layers.size()));
    }
    layers.push_back(parse_item(t, layers.size(), text));
    item.clear();
  };
  for (char ch : text) {
    if (ch == '(') ++depth;
    if (ch == ')') --depth;
    if (depth < 0) throw ValueError(fmt::format("layer list '{}': a ')' has no '('", text));
    if (ch == ',' && depth == 0) {
      flush();
    } else {
      item.push_back(ch);
    }
  }
  if (depth != 0) throw ValueError(fmt::format("layer list '{}': a '(' is not closed", text));
  flush();
  return layers;
}

int window_dims(const std::string& kind) {
  const auto w = windows().find(kind);
  return w == windows().end() ? 0 : w->second.dims;
}

bool is_layer_list(const std::string& text) {
  const std::string t = trim(text);
  return !t.empty() && std::isalpha(static_cast<unsigned char>(t[0]));
}

std::string layer_list_text(const std::vector<LayerSpec>& layers) {
  std::vector<std::string> items;
  for (const LayerSpec& l : layers) {
    items.push_back(l.args.empty() ? l.kind
                                   : fmt::format("{}({})", l.kind, fmt::join(l.args, ",")));
  }
  return fmt::format("{}", fmt::join(items, ","));
}

std::vector<Shape> layer_list_shapes(const std::vector<LayerSpec>& layers, const Shape& input) {
  std::vector<Shape> shapes;
  Shape s = input;
  for (size_t i = 0; i < layers.size(); ++i) {
    s = shape_after(layers[i], i, s);
    shapes.push_back(s);
  }
  return shapes;
}

std::shared_ptr<Sequential> build_layer_list(const std::vector<LayerSpec>& layers,
                                             const Shape& input, const Device& device) {
  const std::vector<Shape> shapes = layer_list_shapes(layers, input);
  std::vector<LayerMemory> memory;
  for (size_t i = 0; i < layers.size(); ++i) {
    const Shape& in = i == 0 ? input : shapes[i - 1];
    memory.push_back({std::to_string(i), layers[i].text, parameter_bytes(layers[i], in)});
  }
  check_parameters_fit(memory, device, fmt::format("the model '{}'", layer_list_text(layers)));
  auto net = std::make_shared<Sequential>();
  for (size_t i = 0; i < layers.size(); ++i) {
    net->push_back(make_layer(layers[i], i == 0 ? input : shapes[i - 1], device));
  }
  return net;
}

}  // namespace kdp::nn

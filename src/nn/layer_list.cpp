#include "kdp/nn/layer_list.hpp"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <map>

#include "core/check.hpp"
#include "kdp/core/closest_name.hpp"
#include "kdp/core/error.hpp"
#include "kdp/nn/activation.hpp"
#include "kdp/nn/batch_norm.hpp"
#include "kdp/nn/conv.hpp"
#include "kdp/nn/linear.hpp"
#include "kdp/nn/parameter_memory.hpp"
#include "kdp/nn/pooling.hpp"
#include "kdp/nn/transformer.hpp"
#include "kdp/ops/size2.hpp"

namespace kdp::nn {

namespace {

// What each word takes: the least and most arguments, and from which
// argument on they are probabilities (before it: whole numbers).
struct Grammar {
  size_t least, most;
  size_t probability_from = 0;
};
constexpr size_t kWhole = 99;  // no probabilities
const std::map<std::string, Grammar>& grammar() {
  static const std::map<std::string, Grammar> g = {{"conv", {2, 4, kWhole}},
                                                   {"batchnorm", {0, 0, kWhole}},
                                                   {"relu", {0, 0, kWhole}},
                                                   {"leaky_relu", {0, 0, kWhole}},
                                                   {"tanh", {0, 0, kWhole}},
                                                   {"sigmoid", {0, 0, kWhole}},
                                                   {"gelu", {0, 0, kWhole}},
                                                   {"maxpool", {1, 1, kWhole}},
                                                   {"avgpool", {1, 1, kWhole}},
                                                   {"gap", {0, 0, kWhole}},
                                                   {"dropout", {1, 1, 0}},
                                                   {"dropout2d", {1, 1, 0}},
                                                   {"flatten", {0, 0, kWhole}},
                                                   {"linear", {1, 1, kWhole}},
                                                   {"conv1d", {2, 4, kWhole}},
                                                   {"maxpool1d", {1, 1, kWhole}},
                                                   {"avgpool1d", {1, 1, kWhole}},
                                                   {"conv3d", {2, 4, kWhole}},
                                                   {"maxpool3d", {1, 1, kWhole}},
                                                   {"avgpool3d", {1, 1, kWhole}},
                                                   {"layernorm", {0, 0, kWhole}},
                                                   {"transformer", {3, 4, 3}},
                                                   {"vit", {5, 6, 5}},
                                                   {"gpt", {3, 4, 3}}};
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
    const bool probability = i >= g.probability_from;
    // A convolution's fourth number, its padding, may be 0.
    const int least = spec.kind.rfind("conv", 0) == 0 && i == 3 ? 0 : 1;
    if (probability ? !(v >= 0.0 && v < 1.0) : (v != std::floor(v) || v < least || v > 1e9)) {
      throw fail(probability ? fmt::format("needs a probability in [0, 1), got {}", v)
                             : fmt::format("needs whole numbers >= {}, got {}", least, v));
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
  if (k == "layernorm") {
    if (in.rank() < 1) does_not_fit(l, position, in, "it normalises the last dimension");
    return in;
  }
  if (k == "transformer") {
    if (in.rank() != 2) {
      does_not_fit(l, position, in, "it takes sequences [tokens, features]");
    }
    if (in[1] % whole(l.args[1]) != 0) {
      does_not_fit(l, position, in,
                   fmt::format("{} heads do not divide {} features", whole(l.args[1]), in[1]));
    }
    return in;
  }
  if (is_model_word(k)) {
    throw ValueError(fmt::format(
        "layer {} '{}' is a whole model, with its own head to the data's classes: it stands "
        "alone in the list",
        position, l.text));
  }
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
  if (k == "layernorm") {
    return std::make_shared<LayerNorm>(std::vector<int64_t>{in[in.rank() - 1]}, 1e-5, true, true,
                                       device);
  }
  if (k == "transformer") {
    return pre_norm_encoder(in[1], whole(l.args[1]), whole(l.args[2]), whole(l.args[0]),
                            l.args.size() > 3 ? static_cast<float>(l.args[3]) : 0.1f, device);
  }
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
  if (l.kind == "layernorm") return static_cast<size_t>(in[in.rank() - 1]) * 2 * sizeof(float);
  if (l.kind == "transformer") {
    return static_cast<size_t>(whole(l.args[0])) *
           TransformerEncoderLayer::parameter_bytes(in[1], whole(l.args[2]));
  }
  return 0;
}

// The options of vit(patch, dim, depth, heads, mlp[, dropout]).
ViTOptions vit_options(const LayerSpec& l) {
  ViTOptions o;
  o.patch = whole(l.args[0]);
  o.dim = whole(l.args[1]);
  o.depth = whole(l.args[2]);
  o.heads = whole(l.args[3]);
  o.mlp = whole(l.args[4]);
  if (l.args.size() > 5) o.dropout = static_cast<float>(l.args[5]);
  return o;
}

// The options of gpt(depth, heads, dim[, dropout]).
GPTOptions gpt_options(const LayerSpec& l) {
  GPTOptions o;
  o.depth = whole(l.args[0]);
  o.heads = whole(l.args[1]);
  o.dim = whole(l.args[2]);
  if (l.args.size() > 3) o.dropout = static_cast<float>(l.args[3]);
  return o;
}

// gpt(...) on token windows [context] of `vocab` ids.
std::shared_ptr<Module> build_gpt(const LayerSpec& l, const Shape& input, int64_t vocab,
                                  const Device& device) {
  const GPTOptions o = gpt_options(l);
  if (input.rank() != 1) does_not_fit(l, 0, input, "it takes sequences of token ids [context]");
  if (o.dim % o.heads != 0) {
    does_not_fit(l, 0, input, fmt::format("{} heads do not divide dim {}", o.heads, o.dim));
  }
  const size_t f = sizeof(float);
  const auto dim = static_cast<size_t>(o.dim);
  const std::vector<LayerMemory> memory = {
      {"tok_embed", "Embedding (and the tied head)", static_cast<size_t>(vocab) * dim * f},
      {"pos_embed", "positions", static_cast<size_t>(input[0]) * dim * f},
      {"encoder", "TransformerEncoder",
       static_cast<size_t>(o.depth) * TransformerEncoderLayer::parameter_bytes(o.dim, 4 * o.dim)},
      {"norm", "LayerNorm", 2 * dim * f}};
  check_parameters_fit(memory, device, fmt::format("the model '{}'", l.text));
  return std::make_shared<GPT>(vocab, input[0], o, device);
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

bool is_model_word(const std::string& kind) {
  return kind == "vit" || kind == "gpt";
}

std::shared_ptr<Module> build_model_word(const LayerSpec& l, const Shape& input, int64_t classes,
                                         const Device& device) {
  KDP_CHECK(is_model_word(l.kind), ValueError, "'{}' is not a model word (vit, gpt)", l.text);
  if (l.kind == "gpt") return build_gpt(l, input, classes, device);
  const ViTOptions o = vit_options(l);
  if (input.rank() != 3) does_not_fit(l, 0, input, "it takes images [channels, height, width]");
  if (input[1] % o.patch != 0 || input[2] % o.patch != 0) {
    does_not_fit(
        l, 0, input,
        fmt::format("patches of {} do not tile {} x {} images", o.patch, input[1], input[2]));
  }
  if (o.dim % o.heads != 0) {
    does_not_fit(l, 0, input, fmt::format("{} heads do not divide dim {}", o.heads, o.dim));
  }
  const size_t f = sizeof(float);
  const auto dim = static_cast<size_t>(o.dim);
  const auto tokens = static_cast<size_t>(input[1] / o.patch * (input[2] / o.patch));
  const std::vector<LayerMemory> memory = {
      {"patch_embed", "Conv2d", Conv2d::parameter_bytes(input[0], o.dim, o.patch, 1, true)},
      {"pos_embed", "positions", (1 + tokens) * dim * f + dim * f},
      {"encoder", "TransformerEncoder",
       static_cast<size_t>(o.depth) * TransformerEncoderLayer::parameter_bytes(o.dim, o.mlp)},
      {"head", "LayerNorm and Linear", 2 * dim * f + Linear::parameter_bytes(o.dim, classes)}};
  check_parameters_fit(memory, device, fmt::format("the model '{}'", l.text));
  return std::make_shared<VisionTransformer>(input, classes, o, device);
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

#pragma once
/// \file
/// A model written as a list of layers, as kdp-train's --model takes it:
///
///   conv(out,k[,stride[,padding]])  Conv2d
///   batchnorm                       BatchNorm1d, 2d or 3d, from the input's rank
///   relu, leaky_relu, tanh, sigmoid, gelu
///   maxpool(k), avgpool(k)          MaxPool2d, AvgPool2d (stride k)
///   conv1d(out,k[,stride[,padding]])  Conv1d, on signals [channels, length]
///   maxpool1d(k), avgpool1d(k)      MaxPool1d, AvgPool1d (stride k)
///   conv3d(out,k[,stride[,padding]])  Conv3d, on volumes [channels, depth, height, width]
///   maxpool3d(k), avgpool3d(k)      MaxPool3d, AvgPool3d (stride k)
///   gap                             AdaptiveAvgPool2d(1): global average pooling
///   dropout(p), dropout2d(p)
///   flatten
///   linear(out)
///   layernorm                       LayerNorm over the last dimension
///   transformer(depth,heads,mlp[,dropout])  TransformerEncoder of `depth`
///                                   pre-norm GELU layers (as VisionTransformer's
///                                   encoder), on sequences [tokens, features]
///
/// and the reference models, each a whole list on its own, with its head to
/// the data's classes (build_model_word):
///
///   vit(patch,dim,depth,heads,mlp[,dropout])  VisionTransformer (dropout 0.1
///                                   unless given), its state-dict keys those
///                                   of kdp/nn/transformer.hpp
///   gpt(depth,heads,dim[,dropout])  GPT on token windows [context] (the
///                                   data's classes are its vocabulary; dropout
///                                   0.1 unless given), kdp/nn/transformer.hpp
///
/// e.g. "conv(32,3),relu,conv(64,3),relu,maxpool(2),dropout(0.25),flatten,
/// linear(128),relu,dropout(0.5),linear(10)" (the pytorch/examples MNIST CNN).
/// The layers become an nn::Sequential whose shapes follow from the input's,
/// so its state-dict keys are PyTorch's for the same nn.Sequential ("0.weight",
/// "1.running_mean", ...).

#include <memory>
#include <string>
#include <vector>

#include "kdp/nn/sequential.hpp"

namespace kdp::nn {

/// One layer of a list: its word, its numbers and its text as written.
struct LayerSpec {
  std::string kind;
  std::vector<double> args;
  std::string text;
};

/// Parses a layer list; a word or argument that is not one of the above is a
/// ValueError naming it and its position.
std::vector<LayerSpec> parse_layer_list(const std::string& text);

/// Whether `kind` is a reference model's word (vit, gpt), which stands alone.
bool is_model_word(const std::string& kind);

/// The reference model of a model word, for samples of `input` and `classes`
/// outputs, on `device`; what does not fit (patches that do not tile the
/// images, heads that do not divide dim, parameters beyond the device's
/// memory) is an error naming the word and the shape.
std::shared_ptr<Module> build_model_word(const LayerSpec& word, const Shape& input, int64_t classes,
                                         const Device& device = get_default_device());

/// Whether `text` is a layer list (it starts with a word) rather than
/// kdp-train's "784,256,10".
bool is_layer_list(const std::string& text);

/// The spatial dimensions a layer word's window slides over (conv1d and the
/// 1-d pools: 1, conv and the 2-d pools: 2, conv3d and the 3-d pools: 3), 0
/// for the other words.
int window_dims(const std::string& kind);

/// The list written back in its canonical form ("conv(32,3),relu,...").
std::string layer_list_text(const std::vector<LayerSpec>& layers);

/// The shape of one sample after each layer, for samples of `input` (no batch
/// dimension). A layer that does not fit its input is a ShapeError naming
/// the layer, its position and both shapes.
std::vector<Shape> layer_list_shapes(const std::vector<LayerSpec>& layers, const Shape& input);

/// The model of `layers` for samples of `input`, on `device`. Shapes are
/// checked first, then every layer's parameters against the device's memory,
/// before anything is allocated.
std::shared_ptr<Sequential> build_layer_list(const std::vector<LayerSpec>& layers,
                                             const Shape& input,
                                             const Device& device = get_default_device());

}  // namespace kdp::nn

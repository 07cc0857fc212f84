#include <gtest/gtest.h>

#include "test_util.hpp"

using namespace kdp;

namespace {
const char* kExamplesCnn =
    "conv(32,3),relu,conv(64,3),relu,maxpool(2),dropout(0.25),flatten,linear(128),relu,"
    "dropout(0.5),linear(10)";
}

TEST(LayerList, ThePyTorchExamplesCnnHasItsShapesKeysAndParameterCount) {
  const auto layers = nn::parse_layer_list(kExamplesCnn);
  ASSERT_EQ(layers.size(), 11u);
  EXPECT_EQ(nn::layer_list_text(layers), kExamplesCnn);
  const auto shapes = nn::layer_list_shapes(layers, Shape{1, 28, 28});
  EXPECT_EQ(shapes[0], Shape({32, 26, 26}));
  EXPECT_EQ(shapes[4], Shape({64, 12, 12}));
  EXPECT_EQ(shapes[6], Shape({9216}));
  EXPECT_EQ(shapes.back(), Shape({10}));
  auto net = nn::build_layer_list(layers, Shape{1, 28, 28});
  // torch's Net of pytorch/examples mnist/main.py: 1,199,882 parameters.
  EXPECT_EQ(net->num_parameters(), 1199882);
  std::vector<std::string> keys;
  for (const auto& [k, t] : net->state_dict()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias", "7.weight",
                                            "7.bias", "10.weight", "10.bias"}));
  EXPECT_EQ(net->forward(Tensor::zeros({2, 1, 28, 28})).shape(), Shape({2, 10}));
}

TEST(LayerList, BatchNormPoolingAndSpacesAreUnderstood) {
  const auto layers = nn::parse_layer_list(
      " conv(8, 3, 1, 1), batchnorm, relu, avgpool(2), dropout2d(0.1), gap, flatten, batchnorm, "
      "linear(4)");
  auto net = nn::build_layer_list(layers, Shape{1, 8, 8});
  EXPECT_NE(dynamic_cast<nn::BatchNorm2d*>((*net)[1].get()), nullptr);
  EXPECT_NE(dynamic_cast<nn::BatchNorm1d*>((*net)[7].get()), nullptr);
  EXPECT_EQ(nn::layer_list_shapes(layers, Shape{1, 8, 8})[5], Shape({8, 1, 1}));
  const auto state = net->state_dict();
  EXPECT_NE(nn::find(state, "1.num_batches_tracked"), nullptr);
  EXPECT_EQ(net->forward(test::random_tensor({3, 1, 8, 8}, 1)).shape(), Shape({3, 4}));
  EXPECT_TRUE(nn::is_layer_list("conv(1,1)"));
  EXPECT_FALSE(nn::is_layer_list("784,256,10"));
  EXPECT_FALSE(nn::is_layer_list("784,x,10"));  // a mistyped MLP, reported as one
}

TEST(LayerList, MistakesAreNamedBeforeAnythingIsBuilt) {
  auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([] {
              nn::parse_layer_list("conv(32,3),rleu");
            }).find("layer 1 'rleu' is not a layer; did you mean relu?"),
            std::string::npos);
  // A word of another framework, and one nothing resembles: every layer named.
  const std::string conv2d = message([] { nn::parse_layer_list("conv2d(16,3),relu"); });
  EXPECT_NE(conv2d.find("layer 0 'conv2d(16,3)' is not a layer; did you mean conv?"),
            std::string::npos)
      << conv2d;
  const std::string unknown = message([] { nn::parse_layer_list("capsule"); });
  EXPECT_EQ(unknown.find("did you mean"), std::string::npos) << unknown;
  for (const char* word : {"conv", "batchnorm", "maxpool", "dropout2d", "flatten", "linear"}) {
    EXPECT_NE(unknown.find(word), std::string::npos) << unknown;
  }
  EXPECT_NE(message([] { nn::parse_layer_list("conv(32)"); }).find("takes 2 to 4 numbers"),
            std::string::npos);
  EXPECT_NE(message([] { nn::parse_layer_list("dropout(1.5)"); }).find("probability"),
            std::string::npos);
  EXPECT_NE(message([] { nn::parse_layer_list("linear(1.5)"); }).find("whole numbers"),
            std::string::npos);
  EXPECT_NE(message([] { nn::parse_layer_list("conv(3,3"); }).find("not closed"),
            std::string::npos);
  const std::string shape_error = message([] {
    nn::layer_list_shapes(nn::parse_layer_list("conv(8,3),linear(10)"), Shape{1, 28, 28});
  });
  EXPECT_NE(shape_error.find("layer 1 'linear(10)' does not fit its input [8, 26, 26]"),
            std::string::npos)
      << shape_error;
  EXPECT_NE(shape_error.find("put flatten before it"), std::string::npos);
  EXPECT_NE(
      message([] {
        nn::layer_list_shapes(nn::parse_layer_list("maxpool(2),maxpool(30)"), Shape{1, 28, 28});
      }).find("layer 1 'maxpool(30)' does not fit its input [1, 14, 14]"),
      std::string::npos);
  EXPECT_NE(message([] {
              nn::layer_list_shapes(nn::parse_layer_list("conv(4,3)"), Shape{784});
            }).find("it takes images"),
            std::string::npos);
  // Too large for the device: refused before allocating.
  EXPECT_THROW(
      nn::build_layer_list(nn::parse_layer_list("flatten,linear(1000000000)"), Shape{1, 28, 28}),
      ValueError);
}

// Signals [channels, length]: conv1d, batchnorm (1d), the 1-d pools; 1-d and
// 2-d layers refuse each other's samples, naming the layer.
TEST(LayerList, SignalsTakeOneDimensionalLayers) {
  const auto layers = nn::parse_layer_list(
      "conv1d(8,3,1,1),batchnorm,relu,maxpool1d(2),conv1d(4,3),avgpool1d(2),"
      "flatten,linear(1)");
  const auto shapes = nn::layer_list_shapes(layers, Shape{2, 16});
  EXPECT_EQ(shapes[0], Shape({8, 16}));
  EXPECT_EQ(shapes[3], Shape({8, 8}));
  EXPECT_EQ(shapes[4], Shape({4, 6}));
  EXPECT_EQ(shapes[5], Shape({4, 3}));
  EXPECT_EQ(shapes.back(), Shape({1}));
  auto net = nn::build_layer_list(layers, Shape{2, 16});
  EXPECT_NE(dynamic_cast<nn::Conv1d*>((*net)[0].get()), nullptr);
  EXPECT_NE(dynamic_cast<nn::BatchNorm1d*>((*net)[1].get()), nullptr);
  EXPECT_EQ(net->state_dict().front().second.shape(), Shape({8, 2, 3}));  // PyTorch's Conv1d weight
  EXPECT_EQ(net->forward(test::random_tensor({3, 2, 16}, 1)).shape(), Shape({3, 1}));
  try {
    nn::layer_list_shapes(nn::parse_layer_list("conv1d(4,3)"), Shape{1, 8, 8});
    ADD_FAILURE() << "conv1d took images";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("it takes signals [channels, length]"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(nn::layer_list_shapes(nn::parse_layer_list("conv(4,3)"), Shape{2, 16}), ShapeError);
}

// Volumes [channels, depth, height, width]: conv3d, batchnorm (3d), the 3-d
// pools; PyTorch's weight shape, and images refused by a 3-d layer.
TEST(LayerList, VolumesTakeThreeDimensionalLayers) {
  const auto layers = nn::parse_layer_list(
      "conv3d(4,3,1,1),batchnorm,relu,maxpool3d(2),conv3d(2,2),avgpool3d(1),flatten,linear(3)");
  const auto shapes = nn::layer_list_shapes(layers, Shape{2, 6, 8, 4});
  EXPECT_EQ(shapes[0], Shape({4, 6, 8, 4}));
  EXPECT_EQ(shapes[3], Shape({4, 3, 4, 2}));
  EXPECT_EQ(shapes[4], Shape({2, 2, 3, 1}));
  EXPECT_EQ(shapes.back(), Shape({3}));
  auto net = nn::build_layer_list(layers, Shape{2, 6, 8, 4});
  EXPECT_NE(dynamic_cast<nn::Conv3d*>((*net)[0].get()), nullptr);
  EXPECT_NE(dynamic_cast<nn::BatchNorm3d*>((*net)[1].get()), nullptr);
  EXPECT_NE(dynamic_cast<nn::MaxPool3d*>((*net)[3].get()), nullptr);
  EXPECT_EQ(net->state_dict().front().second.shape(), Shape({4, 2, 3, 3, 3}));
  EXPECT_EQ(net->forward(test::random_tensor({3, 2, 6, 8, 4}, 1)).shape(), Shape({3, 3}));
  try {
    nn::layer_list_shapes(nn::parse_layer_list("conv3d(4,3)"), Shape{1, 8, 8});
    ADD_FAILURE() << "conv3d took images";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("volumes [channels, depth, height, width]"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(nn::layer_list_shapes(nn::parse_layer_list("maxpool3d(4)"), Shape{1, 2, 8, 8}),
               ShapeError);  // a box deeper than the volume
  // What kdp-train reads the samples as follows from the first layer's window.
  EXPECT_EQ(nn::window_dims("conv1d"), 1);
  EXPECT_EQ(nn::window_dims("maxpool"), 2);
  EXPECT_EQ(nn::window_dims("avgpool3d"), 3);
  EXPECT_EQ(nn::window_dims("linear"), 0);
}

// Sequences [tokens, features]: transformer(depth, heads, mlp[, dropout]) and
// layernorm, with PyTorch's keys and the parameter count of their closed
// forms; the heads that do not divide the features, named.
TEST(LayerList, SequencesTakeTransformerLayers) {
  const auto layers = nn::parse_layer_list("transformer(2,2,16,0),layernorm,flatten,linear(3)");
  const auto shapes = nn::layer_list_shapes(layers, Shape{5, 8});
  EXPECT_EQ(shapes[0], Shape({5, 8}));
  EXPECT_EQ(shapes[1], Shape({5, 8}));
  EXPECT_EQ(shapes.back(), Shape({3}));
  auto net = nn::build_layer_list(layers, Shape{5, 8});
  // Per layer: in_proj 8x24 + 24, out_proj 8x8 + 8, linear1 8x16 + 16,
  // linear2 16x8 + 8, two norms 2 x 16.
  const int64_t layer = 8 * 24 + 24 + 8 * 8 + 8 + 8 * 16 + 16 + 16 * 8 + 8 + 2 * 16;
  EXPECT_EQ(static_cast<int64_t>(nn::TransformerEncoderLayer::parameter_bytes(8, 16)),
            layer * static_cast<int64_t>(sizeof(float)));
  EXPECT_EQ(net->num_parameters(), 2 * layer + 16 + 40 * 3 + 3);
  const auto state = net->state_dict();
  EXPECT_NE(nn::find(state, "0.layers.1.self_attn.in_proj_weight"), nullptr);
  EXPECT_NE(nn::find(state, "1.weight"), nullptr);
  EXPECT_EQ(net->forward(test::random_tensor({4, 5, 8}, 3)).shape(), Shape({4, 3}));
  try {
    nn::layer_list_shapes(nn::parse_layer_list("transformer(1,3,16)"), Shape{5, 8});
    ADD_FAILURE() << "3 heads took 8 features";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("layer 0 'transformer(1,3,16)' does not fit its input "
                                         "[5, 8]: 3 heads do not divide 8 features"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(nn::layer_list_shapes(nn::parse_layer_list("transformer(1,2,8)"), Shape{1, 8, 8}),
               ShapeError);
  EXPECT_THROW(nn::parse_layer_list("transformer(1,2)"), ValueError);
  EXPECT_THROW(nn::parse_layer_list("transformer(1,2,8,1.5)"), ValueError);  // not a probability
}

// vit(patch, dim, depth, heads, mlp[, dropout]) is the whole reference model,
// its head to the data's classes: alone in a list, with the keys and
// parameter count of kdp/nn/transformer.hpp's description.
TEST(LayerList, VitIsTheReferenceModelOnItsOwn) {
  const auto word = nn::parse_layer_list("vit(4,8,2,2,16,0)").front();
  EXPECT_TRUE(nn::is_model_word(word.kind));
  EXPECT_FALSE(nn::is_model_word("transformer"));
  auto vit = nn::build_model_word(word, Shape{1, 8, 12}, 10);
  auto* model = dynamic_cast<nn::VisionTransformer*>(vit.get());
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(model->options().dropout, 0.0f);
  const int64_t layer =
      static_cast<int64_t>(nn::TransformerEncoderLayer::parameter_bytes(8, 16) / sizeof(float));
  // patch_embed 8x1x4x4 + 8, cls_token 8, pos_embed (1 + 6) x 8, norm 16,
  // head 8 x 10 + 10.
  EXPECT_EQ(vit->num_parameters(), 8 * 16 + 8 + 8 + 7 * 8 + 2 * layer + 16 + 8 * 10 + 10);
  const auto state = vit->state_dict();
  EXPECT_NE(nn::find(state, "encoder.layers.1.linear2.bias"), nullptr);
  EXPECT_EQ(vit->forward(test::random_tensor({2, 1, 8, 12}, 4)).shape(), Shape({2, 10}));
  EXPECT_EQ(
      dynamic_cast<nn::VisionTransformer&>(
          *nn::build_model_word(nn::parse_layer_list("vit(4,8,1,2,16)").front(), Shape{1, 8, 8}, 3))
          .options()
          .dropout,
      0.1f);  // PyTorch's TransformerEncoderLayer default
  auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string tiles = message([] {
    nn::build_model_word(nn::parse_layer_list("vit(5,64,6,4,128)").front(), Shape{1, 28, 28}, 10);
  });
  EXPECT_NE(tiles.find("layer 0 'vit(5,64,6,4,128)' does not fit its input [1, 28, 28]: patches "
                       "of 5 do not tile 28 x 28 images"),
            std::string::npos)
      << tiles;
  EXPECT_NE(message([] {
              nn::build_model_word(nn::parse_layer_list("vit(4,64,6,5,128)").front(),
                                   Shape{1, 28, 28}, 10);
            }).find("5 heads do not divide dim 64"),
            std::string::npos);
  EXPECT_NE(
      message([] {
        nn::layer_list_shapes(nn::parse_layer_list("vit(4,8,2,2,16),linear(3)"), Shape{1, 8, 8});
      }).find("layer 0 'vit(4,8,2,2,16)' is a whole model"),
      std::string::npos);
  EXPECT_THROW(nn::parse_layer_list("vit(4,8,2,2.5,16)"), ValueError);
  EXPECT_THROW(nn::parse_layer_list("vit(4,8,2,2,16,1)"), ValueError);
}

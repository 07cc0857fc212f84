#pragma once
/// \file
/// Elementwise arithmetic with NumPy broadcasting (scalars, rows, columns and
/// any dimensions of size 1), and elementwise math. All differentiable.

#include "kdp/core/tensor.hpp"

namespace kdp {

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);

Tensor add(const Tensor& a, float b);
Tensor sub(const Tensor& a, float b);
/// b - a
Tensor rsub(const Tensor& a, float b);
Tensor mul(const Tensor& a, float b);
Tensor div(const Tensor& a, float b);
/// b / a
Tensor rdiv(const Tensor& a, float b);

Tensor neg(const Tensor& x);
Tensor square(const Tensor& x);
/// x ** exponent
Tensor pow(const Tensor& x, float exponent);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor abs(const Tensor& x);
/// min(max(x, low), high); the gradient passes where low <= x <= high.
Tensor clamp(const Tensor& x, float low, float high);

inline Tensor operator+(const Tensor& a, const Tensor& b) {
  return add(a, b);
}
inline Tensor operator-(const Tensor& a, const Tensor& b) {
  return sub(a, b);
}
inline Tensor operator*(const Tensor& a, const Tensor& b) {
  return mul(a, b);
}
inline Tensor operator/(const Tensor& a, const Tensor& b) {
  return div(a, b);
}
inline Tensor operator+(const Tensor& a, float b) {
  return add(a, b);
}
inline Tensor operator-(const Tensor& a, float b) {
  return sub(a, b);
}
inline Tensor operator*(const Tensor& a, float b) {
  return mul(a, b);
}
inline Tensor operator/(const Tensor& a, float b) {
  return div(a, b);
}
inline Tensor operator+(float a, const Tensor& b) {
  return add(b, a);
}
inline Tensor operator-(float a, const Tensor& b) {
  return rsub(b, a);
}
inline Tensor operator*(float a, const Tensor& b) {
  return mul(b, a);
}
inline Tensor operator/(float a, const Tensor& b) {
  return rdiv(b, a);
}
inline Tensor operator-(const Tensor& x) {
  return neg(x);
}

}  // namespace kdp

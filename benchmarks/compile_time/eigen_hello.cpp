// The baseline when Taskflow is absent: a small Eigen dense program of hello.cpp's shape
// (a 32x784 by 784x10 product, a coefficient-wise op, a sum, a print).
#include <Eigen/Dense>

#include <cstdio>

int main() {
  Eigen::MatrixXf x = Eigen::MatrixXf::Constant(32, 784, 0.5f);
  Eigen::MatrixXf w = Eigen::MatrixXf::Constant(784, 10, 0.01f);
  Eigen::MatrixXf y = ((x * w).array() + 1.0f).max(0.0f).exp().matrix();
  std::printf("sum of (%ld, %ld): %g\n", static_cast<long>(y.rows()), static_cast<long>(y.cols()),
              static_cast<double>(y.sum()));
  return 0;
}

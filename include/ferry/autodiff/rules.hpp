#pragma once
// Every op's backward rule. The ops only declare them (ops/gradient.hpp); a program that uses
// an op needs its rule defined, because whether a gradient tape records is decided when the op
// runs. The entry headers include this one.

#include "ferry/autodiff/attention_rules.hpp"
#include "ferry/autodiff/convolution_rules.hpp"
#include "ferry/autodiff/elementwise_rules.hpp"
#include "ferry/autodiff/indexing_rules.hpp"
#include "ferry/autodiff/reduce_rules.hpp"
#include "ferry/autodiff/shape_rules.hpp"

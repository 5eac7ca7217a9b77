#pragma once
// Forward declarations of ferry's public types, for headers that only name them.

#include "ferry/core/dtype.hpp"

namespace ferry {

struct bfloat16;
struct float16;
class Shape;
class SymInt;
class SymBool;
class SymFloat;
struct Cost;
class Device;
class Executor;
class ManualExecutor;
template <Element T>
class DeviceArray;
template <Element T>
class HostArray;
template <Element T>
class MeshArray;
class AnyDeviceArray;
class NamedArrays;
struct Slice;
class Index;

class Error;
class ShapeError;
class DeviceMismatch;
class InvalidArgument;
class ExportInsideStep;
class OutOfDeviceMemory;
class UseAfterFree;
class NotDifferentiable;
class DeviceFault;
class FileError;
class FormatError;
struct Layout;
struct PrintOptions;
struct DeviceSpec;
struct FaultPlan;
enum class Fallback : std::uint8_t;
struct DeviceStats;
class MeshShape;
class MeshCoordinate;
enum class Topology : std::uint8_t;
struct LinkSpec;
struct MeshSpec;
enum class Collective : std::uint8_t;
struct CollectivePlan;
template <Element T>
struct KernelArgs;
template <class F>
class Program;
enum class CacheMode : std::uint8_t;

namespace nn {
class Module;
class Linear;
class Sequential;
class ReLU;
class Tanh;
class Sigmoid;
class GELU;
class Embedding;
class LayerNorm;
class RMSNorm;
class Conv2d;
class Dropout;
class MultiheadAttention;
class ModuleList;
class NamedModule;
struct LinearOptions;
struct EmbeddingOptions;
struct LayerNormOptions;
struct RMSNormOptions;
struct Conv2dOptions;
struct MultiheadAttentionOptions;
}  // namespace nn

namespace optim {
class Optimizer;
class LearningRate;
class SGD;
class Adam;
class AdamW;
struct SGDOptions;
struct AdamOptions;
struct AdamWOptions;
}  // namespace optim

}  // namespace ferry

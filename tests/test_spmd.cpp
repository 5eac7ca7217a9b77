// ferry::spmd: a function run once per device with collectives along named mesh axes. The
// per-device program against the same program on one device and on the host; every named
// collective bit for bit against its MeshArray counterpart; the timeline the same on every run
// and the same as the hand-written MeshArray program's; divergent, mismatched and failing
// devices as typed errors without a hang; bad arguments and axes by exact type and message;
// a gradient through an all-reduce inside spmd.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/arrays.hpp"
#include "support/errors.hpp"
#include "support/files.hpp"
#include "support/meshes.hpp"
#include "support/spmd_cases.hpp"
#include "support/temp_dir.hpp"

namespace test_spmd {

namespace {

using ferry_test::values_of;

using ferry::DeviceArray;
using ferry::HostArray;
using ferry::Mesh;
using ferry::MeshArray;
using ferry::MeshSpec;
using ferry::ReduceOp;
using ferry::Shape;
using ferry::Topology;
using ferry_test::expect_error;
using ferry_test::expect_same_bits;
using ferry_test::grid2x2;
using ferry_test::ring4;
using ferry_test::rounding_shards;
using ferry_test::rounding_values;
using Pairs = std::vector<std::pair<std::int64_t, std::int64_t>>;

TEST(Spmd, AMatmulPerDeviceAndAnAllReduceEqualTheGlobalMatmul) {
  // x (3 x 8) sharded by columns, w (8 x 5) by rows: each device's product is a summand. On
  // executors of 1 and 3 threads and the shared one.
  for (const ferry::Executor& executor :
       {ferry::Executor(1), ferry::Executor(3), ferry::Executor::shared()}) {
    SCOPED_TRACE(std::to_string(executor.threads()) + " threads");
    const Mesh mesh = Mesh::modeled(ring4(), executor);
    const std::vector<float> x = rounding_values(24, 1);
    const std::vector<float> w = rounding_values(40, 2);
    std::vector<DeviceArray<float>> xs, ws;
    for (std::int64_t k = 0; k < 4; ++k) {
      std::vector<float> xk, wk;
      for (std::int64_t r = 0; r < 3; ++r)
        for (std::int64_t c = 2 * k; c < 2 * k + 2; ++c)
          xk.push_back(x[static_cast<std::size_t>(r * 8 + c)]);
      for (std::int64_t r = 2 * k; r < 2 * k + 2; ++r)
        for (std::int64_t c = 0; c < 5; ++c) wk.push_back(w[static_cast<std::size_t>(r * 5 + c)]);
      xs.push_back(ferry::to_device(mesh.device(k), xk, Shape{3, 2}));
      ws.push_back(ferry::to_device(mesh.device(k), wk, Shape{2, 5}));
    }
    const auto xm = MeshArray<float>::from_shards(mesh, xs);
    const auto wm = MeshArray<float>::from_shards(mesh, ws);
    const MeshArray<float> y =
        ferry::spmd(mesh, [](const DeviceArray<float>& a, const DeviceArray<float>& b) {
          return ferry::all_reduce(ferry::matmul(a, b), "i");
        })(xm, wm);

    // The same product on one device, and on the host in double.
    const ferry::Device one = ferry::Device::modeled(ferry::specs::tiny());
    const auto global =
        ferry::matmul(ferry::to_device(one, x, Shape{3, 8}), ferry::to_device(one, w, Shape{8, 5}))
            .to_host();
    for (std::int64_t k = 0; k < 4; ++k) {
      const HostArray<float> got = y.shard(k).to_host();
      ASSERT_EQ(got.shape(), (Shape{3, 5}));
      for (std::int64_t r = 0; r < 3; ++r) {
        for (std::int64_t c = 0; c < 5; ++c) {
          double want = 0;
          for (std::int64_t i = 0; i < 8; ++i)
            want += static_cast<double>(x[static_cast<std::size_t>(r * 8 + i)]) *
                    static_cast<double>(w[static_cast<std::size_t>(i * 5 + c)]);
          const auto e = static_cast<std::size_t>(r * 5 + c);
          EXPECT_NEAR(got.data()[e], want, 1e-4);
          EXPECT_NEAR(got.data()[e], global.data()[e], 1e-4);
        }
      }
    }
    EXPECT_FALSE(y.placed());
  }
}

TEST(Spmd, EveryNamedCollectiveEqualsItsMeshCounterpartBitForBit) {
  for (const MeshSpec& spec : {ring4(), grid2x2()}) {
    SCOPED_TRACE(spec.name);
    const Mesh mesh = Mesh::modeled(spec);
    const auto a = rounding_shards(mesh, 4, 6);
    for (std::size_t ax = 0; ax < spec.axis_names.size(); ++ax) {
      const std::string name = spec.axis_names[ax];
      const int axis = static_cast<int>(ax);
      SCOPED_TRACE(name);
      const std::int64_t n = mesh.shape().sizes()[ax];
      Pairs shift;
      for (std::int64_t p = 0; p < n; ++p) shift.emplace_back(p, (p + 1) % n);
      const Pairs partial{{0, n - 1}};
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min, ReduceOp::mean}) {
        expect_same_bits(ferry::spmd(mesh,
                                     [&](const DeviceArray<float>& x) {
                                       return ferry::all_reduce(x, name, op);
                                     })(a),
                         ferry::all_reduce(a, op, axis));
        expect_same_bits(ferry::spmd(mesh,
                                     [&](const DeviceArray<float>& x) {
                                       return ferry::reduce_scatter(x, name, 0, op);
                                     })(a),
                         ferry::reduce_scatter(a, 0, op, axis));
      }
      expect_same_bits(
          ferry::spmd(mesh,
                      [&](const DeviceArray<float>& x) { return ferry::all_reduce(x, name); })(a),
          ferry::all_reduce(a, ReduceOp::sum, axis));
      expect_same_bits(
          ferry::spmd(
              mesh, [&](const DeviceArray<float>& x) { return ferry::all_gather(x, name, 1); })(a),
          ferry::all_gather(a, 1, axis));
      expect_same_bits(ferry::spmd(mesh,
                                   [&](const DeviceArray<float>& x) {
                                     return ferry::all_to_all(x, name, 0, 1);
                                   })(a),
                       ferry::all_to_all(a, 0, 1, axis));
      expect_same_bits(ferry::spmd(mesh,
                                   [&](const DeviceArray<float>& x) {
                                     return ferry::broadcast(x, name, n - 1);
                                   })(a),
                       ferry::broadcast(a, n - 1, axis));
      expect_same_bits(
          ferry::spmd(
              mesh, [&](const DeviceArray<float>& x) { return ferry::permute(x, name, shift); })(a),
          ferry::permute(a, shift, axis));
      expect_same_bits(ferry::spmd(mesh,
                                   [&](const DeviceArray<float>& x) {
                                     return ferry::permute(x, name, partial);
                                   })(a),
                       ferry::permute(a, partial, axis));
    }
  }
}

TEST(Spmd, AxisIndexAndSizeGiveThisDevicesCoordinate) {
  const Mesh mesh = Mesh::modeled(grid2x2());
  const auto a = rounding_shards(mesh, 1, 1);
  std::vector<std::vector<std::int64_t>> seen(4);
  (void)ferry::spmd(mesh, [&](const DeviceArray<float>& x) {
    seen[static_cast<std::size_t>(mesh.index_of(x.device()))] = {
        ferry::axis_index("dp"), ferry::axis_index("tp"), ferry::axis_size("dp"),
        ferry::axis_size("tp")};
    return x;
  })(a);
  EXPECT_EQ(seen, (std::vector<std::vector<std::int64_t>>{
                      {0, 0, 2, 2}, {0, 1, 2, 2}, {1, 0, 2, 2}, {1, 1, 2, 2}}));
}

TEST(Spmd, TuplesAndPairsComeBackAsMeshArraysAndPlainArgumentsReachEveryDevice) {
  const Mesh mesh = Mesh::modeled(grid2x2());
  const auto a = rounding_shards(mesh, 2, 2);
  const auto [sum, gathered] = ferry::spmd(mesh, [](const DeviceArray<float>& x, double scale) {
    return std::pair{ferry::all_reduce(x * scale, "dp"), ferry::all_gather(x, "tp", 0)};
  })(a, 2.0);
  expect_same_bits(gathered, ferry::all_gather(a, 0, 1));
  const auto want = ferry::all_reduce(a, ReduceOp::sum, 0).to_host();
  for (std::int64_t k = 0; k < 4; ++k) {
    const auto got = values_of(sum.shard(k).to_host());
    for (std::size_t e = 0; e < 4; ++e)
      EXPECT_FLOAT_EQ(got[e], 2 * want[static_cast<std::size_t>(k)].data()[e]);
  }
  const auto t = ferry::spmd(mesh, [](const DeviceArray<float>& x) {
    return std::tuple{x, ferry::all_reduce(x, "tp"), x.astype<std::int32_t>()};
  })(a);
  expect_same_bits(std::get<0>(t), a);
  expect_same_bits(std::get<1>(t), ferry::all_reduce(a, ReduceOp::sum, 1));
  EXPECT_EQ(std::get<2>(t).size(), 4);
}

/// The mesh's timeline_text and Chrome trace.
std::string timeline_and_trace(const Mesh& mesh) {
  const ferry_test::TempDir dir("spmd");
  mesh.write_trace(dir.file("trace.json"));
  return mesh.timeline_text() + ferry_test::read_text(dir.file("trace.json"));
}

/// A two-layer tensor-parallel step on `mesh`, each device's thread held up by a different
/// amount on each run (`delay`), so thread timing cannot pass for determinism.
std::string spmd_timeline(int run) {
  const Mesh mesh = Mesh::modeled(ring4());
  std::string timeline;
  // The devices' threads let go of every buffer they made, whatever their order.
  ferry_test::expect_balanced_after(mesh, [&] {
    const auto a = rounding_shards(mesh, 8, 8);
    const auto w = rounding_shards(mesh, 8, 8);
    const auto y =
        ferry::spmd(mesh, [&](const DeviceArray<float>& x, const DeviceArray<float>& wk) {
          const auto k = ferry::axis_index("i");
          std::this_thread::sleep_for(std::chrono::microseconds(((k + run) % 4) * 300));
          auto h = ferry::all_reduce(ferry::matmul(x, wk), "i");
          std::this_thread::sleep_for(std::chrono::microseconds(((3 - k + run) % 4) * 300));
          h = ferry::all_gather(ferry::matmul(h, wk) + x, "i", 0);
          return ferry::reduce_scatter(ferry::sum(h, {1}, true), "i", 0);
        })(a, w);
    ferry::wait(y);
    timeline = timeline_and_trace(mesh);  // the program's arrays still alive, as below
  });
  return timeline;
}

TEST(Spmd, TheTimelineIsTheSameOnEveryRunAndThatOfTheMeshArrayProgram) {
  const std::string first = spmd_timeline(0);
  EXPECT_NE(first.find("busy"), std::string::npos);
  EXPECT_NE(first.find("matmul"), std::string::npos);
  EXPECT_EQ(spmd_timeline(1), first);
  EXPECT_EQ(spmd_timeline(2), first);

  // The same program written with mesh arrays, each device's ops submitted in device order
  // between the collectives: spmd's order.
  const Mesh mesh = Mesh::modeled(ring4());
  const auto a = rounding_shards(mesh, 8, 8);
  const auto w = rounding_shards(mesh, 8, 8);
  auto per_device = [&](const MeshArray<float>& m, auto f) {
    std::vector<DeviceArray<float>> out;
    for (std::int64_t k = 0; k < 4; ++k) out.push_back(f(k, m.shard(k)));
    return MeshArray<float>::from_shards(mesh, std::move(out));
  };
  auto h = ferry::all_reduce(
      per_device(a, [&](std::int64_t k,
                        const DeviceArray<float>& x) { return ferry::matmul(x, w.shard(k)); }),
      ReduceOp::sum, 0);
  h = ferry::all_gather(per_device(h,
                                   [&](std::int64_t k, const DeviceArray<float>& x) {
                                     return ferry::matmul(x, w.shard(k)) + a.shard(k);
                                   }),
                        0, 0);
  const auto y = ferry::reduce_scatter(
      per_device(
          h, [](std::int64_t, const DeviceArray<float>& x) { return ferry::sum(x, {1}, true); }),
      0, ReduceOp::sum, 0);
  h = MeshArray<float>();  // as each device's `h` goes when its function returns
  ferry::wait(y);
  EXPECT_EQ(timeline_and_trace(mesh), first);
}

TEST(SpmdErrors, ADeviceThatReturnsEarlyFailsTheOthersCollectiveWithoutAHang) {
  const Mesh mesh = Mesh::modeled(ring4());
  // A device that bails out of the program, and the others' collectives it fails, must
  // not keep a buffer.
  ferry_test::expect_balanced_after(mesh, [&] {
    const auto a = rounding_shards(mesh, 2, 3);
    std::mutex m;
    std::vector<std::string> seen(4);
    const auto fn = [&](const DeviceArray<float>& x) {
      const auto k = static_cast<std::size_t>(ferry::axis_index("i"));
      if (k == 2) return x;
      try {
        return ferry::all_reduce(x, "i");
      } catch (const ferry::InvalidArgument& e) {
        std::lock_guard lock(m);
        seen[k] = e.what();
        throw;
      }
    };
    auto dev = [&](std::int64_t k) {
      return "device " + std::to_string(k) + " (" + mesh.device(k).name() + ")";
    };
    auto msg = [&](std::int64_t k) {
      return "[all_reduce] under spmd, " + dev(k) +
             " calls all_reduce(float32 (2, 3), 'i', sum) (collective 1 of its program), but " +
             dev(2) +
             " returned before reaching it: every device must make the same collective calls";
    };
    expect_error<ferry::InvalidArgument>([&] { return ferry::spmd(mesh, fn)(a); }, msg(0));
    EXPECT_EQ(seen, (std::vector<std::string>{msg(0), msg(1), "", msg(3)}));

    // One more collective on device 0 than on the others.
    expect_error<ferry::InvalidArgument>(
        [&] {
          return ferry::spmd(mesh, [](const DeviceArray<float>& x) {
            auto y = ferry::all_reduce(x, "i");
            if (ferry::axis_index("i") == 0) y = ferry::all_gather(y, "i");
            return y;
          })(a);
        },
        "[all_gather] under spmd, " + dev(0) +
            " calls all_gather(float32 (2, 3), 'i', dim 0) (collective 2 of its program), but " +
            dev(1) + " returned, " + dev(2) + " returned, " + dev(3) +
            " returned before reaching it: every device must make the same collective calls");
  });
}

TEST(SpmdErrors, AnExceptionInOneDevicesFunctionIsTheOneSpmdThrows) {
  const Mesh mesh = Mesh::modeled(ring4());
  // Whatever each device's function made before the throw is freed.
  ferry_test::expect_balanced_after(mesh, [&] {
    const auto a = rounding_shards(mesh, 2, 3);
    // Device 2 throws before the all-reduce the others wait at: its error, not theirs.
    expect_error<std::runtime_error>(
        [&] {
          return ferry::spmd(mesh, [](const DeviceArray<float>& x) {
            if (ferry::axis_index("i") == 2) throw std::runtime_error("device 2 fails");
            return ferry::all_reduce(x, "i");
          })(a);
        },
        "device 2 fails");
    // Every device throws: the first by device order.
    expect_error<ferry::ShapeError>(
        [&] {
          return ferry::spmd(mesh, [](const DeviceArray<float>& x) -> DeviceArray<float> {
            throw ferry::ShapeError("device " + std::to_string(ferry::axis_index("i")));
            return x;
          })(a);
        },
        "device 0");
    // The mesh collective's own error reaches every device and spmd: shards that differ.
    const auto uneven = ferry::spmd(mesh, [](const DeviceArray<float>& x) {
      return ferry::axis_index("i") == 1 ? ferry::slice(x, 0, 0, 1) : x;
    })(a);
    EXPECT_THROW(
        ferry::spmd(mesh,
                    [](const DeviceArray<float>& x) { return ferry::all_reduce(x, "i"); })(uneven),
        ferry::ShapeError);
  });
}

TEST(SpmdErrors, DevicesMakingDifferentCallsAtOnePointNameBoth) {
  const Mesh mesh = Mesh::modeled(grid2x2());
  const auto a = rounding_shards(mesh, 2, 4);
  auto dev = [&](std::int64_t k) {
    return "device " + std::to_string(k) + " (" + mesh.device(k).name() + ")";
  };
  expect_error<ferry::InvalidArgument>(
      [&] {
        return ferry::spmd(mesh, [](const DeviceArray<float>& x) {
          return ferry::axis_index("tp") == 1 ? ferry::all_gather(x, "tp")
                                              : ferry::all_reduce(x, "tp");
        })(a);
      },
      "[all_reduce] under spmd, collective 1 differs: " + dev(0) +
          " calls all_reduce(float32 (2, 4), 'tp', sum), " + dev(1) +
          " calls all_gather(float32 (2, 4), 'tp', dim 0)");
  expect_error<ferry::InvalidArgument>(
      [&] {
        return ferry::spmd(mesh, [](const DeviceArray<float>& x) {
          return ferry::all_reduce(x, ferry::axis_index("dp") == 1 ? "tp" : "dp");
        })(a);
      },
      "[all_reduce] under spmd, collective 1 differs: " + dev(0) +
          " calls all_reduce(float32 (2, 4), 'dp', sum), " + dev(2) +
          " calls all_reduce(float32 (2, 4), 'tp', sum)");
  expect_error<ferry::InvalidArgument>(
      [&] {
        return ferry::spmd(mesh, [](const DeviceArray<float>& x) {
          return ferry::all_reduce(x, "dp",
                                   ferry::axis_index("tp") == 1 ? ReduceOp::max : ReduceOp::sum);
        })(a);
      },
      "[all_reduce] under spmd, collective 1 differs: " + dev(0) +
          " calls all_reduce(float32 (2, 4), 'dp', sum), " + dev(1) +
          " calls all_reduce(float32 (2, 4), 'dp', max)");
}

TEST(SpmdErrors, AnAxisTheMeshLacksOrNoSpmdAtAll) {
  const Mesh mesh = Mesh::modeled(grid2x2());
  const auto a = rounding_shards(mesh, 2, 4);
  expect_error<ferry::InvalidArgument>(
      [&] {
        return ferry::spmd(
            mesh, [](const DeviceArray<float>& x) { return ferry::all_reduce(x, "pp"); })(a);
      },
      "[all_reduce] mesh grid has no axis named 'pp'");
  expect_error<ferry::InvalidArgument>(
      [&] {
        return ferry::spmd(mesh, [](const DeviceArray<float>& x) {
          (void)ferry::axis_index("i");
          return x;
        })(a);
      },
      "[axis_index] mesh grid has no axis named 'i'");
  MeshSpec unnamed = ring4();
  unnamed.axis_names.clear();
  const Mesh plain = Mesh::modeled(unnamed);
  expect_error<ferry::InvalidArgument>(
      [&] {
        return ferry::spmd(plain, [](const DeviceArray<float>& x) {
          return ferry::permute(x, "i", Pairs{{0, 1}});
        })(rounding_shards(plain, 1, 1));
      },
      "[permute] mesh ring has no axis named 'i' (its spec names none)");
  const std::string outside =
      "' is a named mesh axis, which only a function run by ferry::spmd has; outside it, give a "
      "MeshArray and an axis index";
  expect_error<ferry::InvalidArgument>([&] { return ferry::all_reduce(a.shard(0), "tp"); },
                                       "[all_reduce] axis 'tp" + outside);
  expect_error<ferry::InvalidArgument>([&] { return ferry::all_to_all(a.shard(0), "dp", 0, 1); },
                                       "[all_to_all] axis 'dp" + outside);
  expect_error<ferry::InvalidArgument>([&] { return ferry::axis_size("dp"); },
                                       "[axis_size] axis 'dp" + outside);
}

TEST(SpmdErrors, ArgumentsAndResultsThatDoNotFitTheMesh) {
  const Mesh mesh = Mesh::modeled(grid2x2());
  const Mesh other = Mesh::modeled(ring4());
  const auto a = rounding_shards(mesh, 2, 4);
  const auto fn = [](const DeviceArray<float>& x) { return x; };
  expect_error<ferry::InvalidArgument>(
      [&] { return ferry::spmd(mesh, fn)(rounding_shards(other, 2, 4)); },
      "[spmd] argument 0 lives on mesh ring (4), not on the mesh grid (2, 2) "
      "the function runs on");
  expect_error<ferry::InvalidArgument>([&] { return ferry::spmd(mesh, fn)(MeshArray<float>()); },
                                       "[spmd] argument 0 is an empty mesh array");
  expect_error<ferry::InvalidArgument>(
      [&] {
        return ferry::spmd(mesh, [](double, const DeviceArray<float>& x) { return x; })(1.0,
                                                                                        a.shard(3));
      },
      "[spmd] argument 1 is a DeviceArray on " + mesh.device(3).name() +
          ", which one device holds: give a MeshArray (ferry::distribute or "
          "MeshArray::from_shards) so "
          "each device gets its own shard");
  expect_error<ferry::InvalidArgument>(
      [&] {
        return ferry::spmd(mesh,
                           [&](const DeviceArray<float>& x) { return x.to(mesh.device(0)); })(a);
      },
      "[spmd] result 0 of device 1 (" + mesh.device(1).name() + ") lives on " +
          mesh.device(0).name() + ": each device's function must return arrays on its own device");
  expect_error<ferry::InvalidArgument>(
      [&] {
        return ferry::spmd(mesh, [&](const DeviceArray<float>& x) {
          return ferry::all_reduce(ferry::axis_index("tp") == 1 ? a.shard(0) : x, "tp");
        })(a);
      },
      "[all_reduce] under spmd, device 1 (" + mesh.device(1).name() +
          ") gives an operand that lives on " + mesh.device(0).name() +
          ": each device's operand must be its own");
}

TEST(SpmdGrad, ValueAndGradThroughAnAllReduceInsideSpmd) {
  // loss(w) = sum of device 0's all_reduce of (w on device k)^2 * (k + 1): 10 w^2 summed, so
  // the gradient is 20 w.
  const Mesh mesh = Mesh::modeled(ring4());
  // The tape's saved values and the copies it made go with the results.
  ferry_test::expect_balanced_after(mesh, [&] {
    const auto w = ferry::to_device(mesh.device(0), std::vector<double>{0.5, -1.25, 2.0}, Shape{3});
    const auto loss = [&](const DeviceArray<double>& v) {
      std::vector<DeviceArray<double>> copies;
      for (std::int64_t k = 0; k < 4; ++k) copies.push_back(v.to(mesh.device(k)));
      const auto out = ferry::spmd(mesh, [](const DeviceArray<double>& x) {
        return ferry::all_reduce(x * x * static_cast<double>(ferry::axis_index("i") + 1), "i");
      })(MeshArray<double>::from_shards(mesh, copies));
      return ferry::sum(out.shard(0));
    };
    const auto [value, grad] = ferry::value_and_grad(loss)(w);
    EXPECT_DOUBLE_EQ(value.to_host().data()[0], 10 * (0.25 + 1.5625 + 4.0));
    const auto g = grad.to_host();
    EXPECT_DOUBLE_EQ(g.data()[0], 10.0);
    EXPECT_DOUBLE_EQ(g.data()[1], -25.0);
    EXPECT_DOUBLE_EQ(g.data()[2], 40.0);
  });
}

}  // namespace

}  // namespace test_spmd

#pragma once
// A scratch directory for a test: made fresh under the system's temporary directory, named
// after the running test, and removed with everything in it.

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <string>
#include <system_error>
#include <vector>

namespace ferry_test {

class TempDir {
 public:
  /// A new directory whose name starts with `prefix`, then the running test's name.
  explicit TempDir(const std::string& prefix) {
    std::random_device entropy;
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '_');  // a parameterized test's "Name/manual"
    path_ = std::filesystem::temp_directory_path() /
            (prefix + "_" + name + "_" + std::to_string(entropy()));
    std::filesystem::create_directories(path_);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }

  /// The path of a file called `name` in the directory.
  std::string file(const std::string& name) const { return (path_ / name).string(); }

  /// The names of the files in the directory, sorted.
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(path_)) {
      names.push_back(entry.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }

 private:
  std::filesystem::path path_;
};

}  // namespace ferry_test

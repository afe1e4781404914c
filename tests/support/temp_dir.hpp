#pragma once
// A fresh directory for one test, removed with everything in it when the test ends: under the
// system's temporary directory, named by `prefix`, the process id and the running test.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace weft::test {

struct TempDir {
    std::filesystem::path path;
    explicit TempDir(const std::string& prefix) {
        path = std::filesystem::temp_directory_path() /
               (prefix + "_" + std::to_string(::getpid()) + "_" +
                ::testing::UnitTest::GetInstance()->current_test_info()->name());
        std::filesystem::remove_all(path);
        std::filesystem::create_directories(path);
    }
    ~TempDir() { std::filesystem::remove_all(path); }
};

}  // namespace weft::test

#pragma once
#include <filesystem>
#include <string>

namespace vatic {

// Reads a whole file; throws vatic::Error naming the path when it cannot.
std::string read_file(const std::filesystem::path& path);

// Writes a file atomically: temp file in the same folder, fsync, rename, fsync of the folder.
void write_file_atomic(const std::filesystem::path& path, const std::string& data);

}  // namespace vatic

#pragma once
// Text the client prints the way ollama prints it: Go durations, sizes, relative times, the --verbose summary
// and the `ps` table.
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "util/json.h"

namespace vatic::cli {

// Go's time.Duration.String(): "0s", "850ns", "12.5µs", "123.456789ms", "1.5s", "2m3.25s", "1h0m0s".
std::string go_duration(int64_t ns);
// ollama's format.HumanBytes (decimal units): "512 B", "1.5 KB", "12 MB", "3.2 GB".
std::string human_bytes(int64_t bytes);
// ollama's format.HumanDuration: "Less than a second", "4 seconds", "About a minute", "3 minutes", ...
std::string human_duration(std::chrono::seconds d);
// RFC 3339 ("2026-08-21T10:11:12.123456789+02:00", "...Z") to system time; nullopt when it does not parse.
std::optional<std::chrono::system_clock::time_point> parse_rfc3339(const std::string& text);
// The UNTIL column: "4 minutes from now", "Forever", "Stopping...", "Never".
std::string until_text(const std::string& expires_at, std::chrono::system_clock::time_point now);

// The --verbose block for a final chunk: ollama's Metrics.Summary lines, then the speculative and prefix-reuse ones
// when the server reports them: "speculative" {rounds, drafted, accepted, acceptance_length, position_acceptance}
// and the prefix cache's "prompt_cache" {reused} (or a flat "prompt_reused"). Every line ends with '\n'; empty
// when the chunk holds no metrics.
std::string verbose_summary(const json& final_chunk);

// ollama's format.HumanNumber: "950", "1.2K", "14M", "4.3B".
std::string human_number(int64_t n);

// `/show info`: the Model, Draft, Capabilities, Parameters and System sections of an /api/show answer, read from
// either ollama's layout (details, model_info) or vatic's flat fields.
std::string show_info(const json& show);

// The `vatic ps` table for an /api/ps answer.
std::string ps_table(const json& ps, std::chrono::system_clock::time_point now);

}  // namespace vatic::cli

#include "cli/client_format.h"

#include <cmath>
#include <ctime>
#include <vector>

#include <fmt/format.h>

namespace vatic::cli {

namespace {

// ".5", ".123" from a fraction of `digits` digits, trailing zeros dropped; "" for zero.
std::string fraction(uint64_t frac, int digits) {
  if (frac == 0) return "";
  std::string s = fmt::format("{:0{}}", frac, digits);
  while (!s.empty() && s.back() == '0') s.pop_back();
  return "." + s;
}

int64_t number(const json& j, const char* key) {
  if (!j.contains(key)) return 0;
  const auto& v = j[key];
  if (v.is_number_integer() || v.is_number_unsigned()) return v.get<int64_t>();
  if (v.is_number_float()) return static_cast<int64_t>(v.get<double>());
  return 0;
}

std::string line(const char* label, const std::string& value) { return fmt::format("{:<21} {}\n", label, value); }

std::string rate(int64_t count, int64_t ns) {
  return fmt::format("{:.2f} tokens/s", static_cast<double>(count) / (static_cast<double>(ns) / 1e9));
}

}  // namespace

std::string go_duration(int64_t ns) {
  if (ns == 0) return "0s";
  std::string sign = ns < 0 ? "-" : "";
  uint64_t u = ns < 0 ? static_cast<uint64_t>(-(ns + 1)) + 1 : static_cast<uint64_t>(ns);
  if (u < 1000) return fmt::format("{}{}ns", sign, u);
  if (u < 1000000) return fmt::format("{}{}{}\u00b5s", sign, u / 1000, fraction(u % 1000, 3));
  if (u < 1000000000) return fmt::format("{}{}{}ms", sign, u / 1000000, fraction(u % 1000000, 6));
  uint64_t secs = u / 1000000000;
  std::string out = fmt::format("{}{}s", secs % 60, fraction(u % 1000000000, 9));
  uint64_t mins = secs / 60;
  if (mins > 0) {
    out = fmt::format("{}m", mins % 60) + out;
    if (mins / 60 > 0) out = fmt::format("{}h", mins / 60) + out;
  }
  return sign + out;
}

std::string human_bytes(int64_t b) {
  constexpr double KB = 1000, MB = KB * 1000, GB = MB * 1000, TB = GB * 1000;
  double v;
  const char* unit;
  const double d = static_cast<double>(b);
  if (d >= TB) {
    v = d / TB, unit = "TB";
  } else if (d >= GB) {
    v = d / GB, unit = "GB";
  } else if (d >= MB) {
    v = d / MB, unit = "MB";
  } else if (d >= KB) {
    v = d / KB, unit = "KB";
  } else {
    return fmt::format("{} B", b);
  }
  if (v >= 10 || v == std::trunc(v)) return fmt::format("{} {}", static_cast<int64_t>(v), unit);
  return fmt::format("{:.1f} {}", v, unit);
}

std::string human_duration(std::chrono::seconds d) {
  const int64_t s = d.count();
  if (s < 1) return "Less than a second";
  if (s == 1) return "1 second";
  if (s < 60) return fmt::format("{} seconds", s);
  const int64_t m = s / 60;
  if (m == 1) return "About a minute";
  if (m < 60) return fmt::format("{} minutes", m);
  const int64_t h = static_cast<int64_t>(std::llround(static_cast<double>(s) / 3600.0));
  if (h == 1) return "About an hour";
  if (h < 48) return fmt::format("{} hours", h);
  if (h < 24 * 7 * 2) return fmt::format("{} days", h / 24);
  if (h < 24 * 30 * 2) return fmt::format("{} weeks", h / 24 / 7);
  if (h < 24 * 365 * 2) return fmt::format("{} months", h / 24 / 30);
  return fmt::format("{} years", h / 24 / 365);
}

std::optional<std::chrono::system_clock::time_point> parse_rfc3339(const std::string& text) {
  int Y, M, D, h, m, s, consumed = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &Y, &M, &D, &h, &m, &s, &consumed) != 6) return std::nullopt;
  size_t i = static_cast<size_t>(consumed);
  int64_t frac_ns = 0;
  if (i < text.size() && text[i] == '.') {
    int64_t scale = 100000000;
    for (++i; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
      frac_ns += (text[i] - '0') * scale;
      scale /= 10;
    }
  }
  int64_t offset = 0;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) {
    int oh = 0, om = 0;
    if (std::sscanf(text.c_str() + i + 1, "%2d:%2d", &oh, &om) != 2) return std::nullopt;
    offset = (text[i] == '+' ? 1 : -1) * (oh * 3600 + om * 60);
  } else if (i >= text.size() || (text[i] != 'Z' && text[i] != 'z')) {
    return std::nullopt;
  }
  // Days from the civil date (Howard Hinnant's algorithm): no timegm, no locale.
  const int64_t y = Y - (M <= 2);
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (M + (M > 2 ? -3 : 9)) + 2) / 5 + D - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  const int64_t days = era * 146097 + doe - 719468;
  const int64_t secs = days * 86400 + h * 3600 + m * 60 + s - offset;
  // The clock counts nanoseconds in 64 bits (until 2262): later times (ollama's "forever" is 2318) saturate.
  using Clock = std::chrono::system_clock;
  const int64_t limit = std::chrono::duration_cast<std::chrono::seconds>(Clock::duration::max()).count() - 1;
  if (secs >= limit) return Clock::time_point::max();
  if (secs <= -limit) return Clock::time_point::min();
  return std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::seconds(secs) +
                                                                      std::chrono::nanoseconds(frac_ns)));
}

std::string until_text(const std::string& expires_at, std::chrono::system_clock::time_point now) {
  if (expires_at.empty() || expires_at.rfind("0001-01-01", 0) == 0) return "Never";
  auto t = parse_rfc3339(expires_at);
  if (!t) return "Unknown";
  auto delta = std::chrono::duration_cast<std::chrono::seconds>(*t - now);
  if (delta.count() < 0) return "Stopping...";
  if (delta > std::chrono::hours(24 * 365 * 20)) return "Forever";
  return human_duration(delta) + " from now";
}

std::string verbose_summary(const json& f) {
  std::string out;
  const int64_t total = number(f, "total_duration"), load = number(f, "load_duration");
  const int64_t pcount = number(f, "prompt_eval_count"), pdur = number(f, "prompt_eval_duration");
  const int64_t ecount = number(f, "eval_count"), edur = number(f, "eval_duration");
  if (total > 0) out += line("total duration:", go_duration(total));
  if (load > 0) out += line("load duration:", go_duration(load));
  if (pcount > 0) out += line("prompt eval count:", fmt::format("{} token(s)", pcount));
  if (pdur > 0) {
    out += line("prompt eval duration:", go_duration(pdur));
    out += line("prompt eval rate:", rate(pcount, pdur));
  }
  // Tokens the prefix cache supplied (not part of prompt_eval_count, as in ollama).
  int64_t reused = number(f, "prompt_reused");
  if (f.contains("prompt_cache") && f["prompt_cache"].is_object()) reused = number(f["prompt_cache"], "reused");
  if (reused > 0) out += line("prompt tokens reused:", fmt::format("{} token(s)", reused));
  if (ecount > 0) out += line("eval count:", fmt::format("{} token(s)", ecount));
  if (f.contains("device") && f["device"].is_string()) out += line("device:", f["device"].get<std::string>());
  if (edur > 0) {
    out += line("eval duration:", go_duration(edur));
    out += line("eval rate:", rate(ecount, edur));
  }
  if (f.contains("speculative") && f["speculative"].is_object()) {
    const json& s = f["speculative"];
    const int64_t rounds = number(s, "rounds"), drafted = number(s, "drafted"), accepted = number(s, "accepted");
    if (rounds > 0 || drafted > 0) {
      double al = s.contains("acceptance_length") && s["acceptance_length"].is_number()
                      ? s["acceptance_length"].get<double>()
                      : (rounds > 0 ? 1.0 + static_cast<double>(accepted) / static_cast<double>(rounds) : 0.0);
      out += line("speculative rounds:", std::to_string(rounds));
      out += line("acceptance length:", fmt::format("{:.2f}", al));
      double pct = drafted > 0 ? 100.0 * static_cast<double>(accepted) / static_cast<double>(drafted) : 0.0;
      out += line("draft tokens accepted:", fmt::format("{}/{} ({:.1f}%)", accepted, drafted, pct));
      if (s.contains("position_acceptance") && s["position_acceptance"].is_array() &&
          !s["position_acceptance"].empty()) {
        std::string rates;
        for (const auto& r : s["position_acceptance"]) {
          if (!rates.empty()) rates += ", ";
          rates += fmt::format("{:.2f}", r.is_number() ? r.get<double>() : 0.0);
        }
        out += line("position acceptance:", rates);
      }
    }
  }
  return out;
}

std::string human_number(int64_t n) {
  auto fmt_unit = [](double v, const char* unit) {
    return v == std::floor(v) ? fmt::format("{:.0f}{}", v, unit) : fmt::format("{:.1f}{}", v, unit);
  };
  const double d = static_cast<double>(n);
  if (n >= 1000000000) return fmt_unit(d / 1e9, "B");
  if (n >= 1000000) return fmt_unit(std::round(d / 1e5) / 10, "M");
  if (n >= 1000) return fmt_unit(std::round(d / 1e2) / 10, "K");
  return std::to_string(n);
}

namespace {

std::string scalar_text(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "";
  return v.dump();
}

// model_info["<arch>.<key>"], else the flat field
int64_t model_info_number(const json& show, const std::string& arch, const char* key) {
  if (show.contains("model_info") && show["model_info"].is_object()) {
    const json& mi = show["model_info"];
    std::string k = arch + "." + key;
    if (mi.contains(k) && mi[k].is_number()) return mi[k].get<int64_t>();
  }
  return number(show, key);
}

}  // namespace

std::string show_info(const json& show) {
  std::vector<std::pair<std::string, std::string>> model;
  const json details = show.contains("details") && show["details"].is_object() ? show["details"] : json::object();
  const json mi = show.contains("model_info") && show["model_info"].is_object() ? show["model_info"] : json::object();
  std::string arch = show.value("architecture", "");
  if (arch.empty() && mi.contains("general.architecture")) arch = scalar_text(mi["general.architecture"]);
  if (arch.empty()) arch = details.value("family", "");
  if (!arch.empty()) model.emplace_back("architecture", arch);
  std::string params;
  if (int64_t n = number(show, "parameter_count"); n > 0) params = human_number(n);
  else if (mi.contains("general.parameter_count") && mi["general.parameter_count"].is_number())
    params = human_number(mi["general.parameter_count"].get<int64_t>());
  else params = details.value("parameter_size", "");
  if (!params.empty()) model.emplace_back("parameters", params);
  if (int64_t n = model_info_number(show, arch, "context_length"); n > 0)
    model.emplace_back("context length", std::to_string(n));
  if (int64_t n = model_info_number(show, arch, "embedding_length"); n > 0)
    model.emplace_back("embedding length", std::to_string(n));
  std::string quant = show.value("quantization", details.value("quantization_level", ""));
  if (!quant.empty()) model.emplace_back("quantization", quant);

  std::string out;
  auto section = [&](const char* title, const std::vector<std::pair<std::string, std::string>>& rows) {
    if (rows.empty()) return;
    size_t w = 0;
    for (const auto& r : rows) w = std::max(w, r.first.size());
    out += fmt::format("  {}\n", title);
    for (const auto& r : rows)
      out += r.second.empty() ? fmt::format("    {}\n", r.first)
                              : fmt::format("    {:<{}}    {}\n", r.first, w, r.second);
    out += "\n";
  };
  section("Model", model);

  if (show.contains("draft") && show["draft"].is_object()) {
    const json& d = show["draft"];
    if (d.value("present", true)) {
      std::vector<std::pair<std::string, std::string>> rows;
      if (d.contains("architecture")) rows.emplace_back("architecture", scalar_text(d["architecture"]));
      if (int64_t n = number(d, "parameter_count"); n > 0) rows.emplace_back("parameters", human_number(n));
      if (d.contains("quantization")) rows.emplace_back("quantization", scalar_text(d["quantization"]));
      else if (d.contains("quantization_level")) rows.emplace_back("quantization", scalar_text(d["quantization_level"]));
      section("Draft", rows);
    }
  }

  if (show.contains("capabilities") && show["capabilities"].is_array()) {
    std::vector<std::pair<std::string, std::string>> rows;
    for (const auto& c : show["capabilities"]) rows.emplace_back(scalar_text(c), "");
    section("Capabilities", rows);
  }

  std::vector<std::pair<std::string, std::string>> prows;
  if (show.contains("parameters") && show["parameters"].is_string()) {
    // ollama: "name value" lines
    std::string text = show["parameters"].get<std::string>();
    size_t start = 0;
    while (start < text.size()) {
      size_t nl = text.find('\n', start);
      std::string l = text.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
      start = nl == std::string::npos ? text.size() : nl + 1;
      auto sp = l.find_first_of(" \t");
      if (l.empty()) continue;
      std::string v = sp == std::string::npos ? "" : l.substr(l.find_first_not_of(" \t", sp));
      prows.emplace_back(l.substr(0, sp), v);
    }
  } else if (show.contains("parameters") && show["parameters"].is_object()) {
    for (const auto& [k, v] : show["parameters"].items()) {
      if (v.is_array()) {
        for (const auto& e : v) prows.emplace_back(k, e.dump());
      } else {
        prows.emplace_back(k, v.is_string() ? v.dump() : scalar_text(v));
      }
    }
  }
  section("Parameters", prows);

  std::string system = show.value("system", "");
  if (!system.empty()) {
    out += "  System\n";
    size_t start = 0;
    while (start < system.size()) {
      size_t nl = system.find('\n', start);
      out += "    " + system.substr(start, nl == std::string::npos ? std::string::npos : nl - start) + "\n";
      start = nl == std::string::npos ? system.size() : nl + 1;
    }
    out += "\n";
  }
  return out;
}

std::string ps_table(const json& ps, std::chrono::system_clock::time_point now) {
  std::vector<std::vector<std::string>> rows;
  bool any_context = false;
  const json models = ps.contains("models") && ps["models"].is_array() ? ps["models"] : json::array();
  for (const auto& m : models)
    if (number(m, "context_length") > 0) any_context = true;
  std::vector<std::string> header = {"NAME", "ID", "SIZE", "PROCESSOR"};
  if (any_context) header.push_back("CONTEXT");
  header.push_back("UNTIL");
  rows.push_back(header);
  for (const auto& m : models) {
    const int64_t size = number(m, "size"), vram = number(m, "size_vram");
    std::string proc;
    if (vram == 0) {
      proc = "100% CPU";
    } else if (vram == size) {
      proc = "100% GPU";
    } else if (vram > size || size == 0) {
      proc = "Unknown";
    } else {
      const int cpu = static_cast<int>(std::lround(100.0 * static_cast<double>(size - vram) / static_cast<double>(size)));
      proc = fmt::format("{}%/{}% CPU/GPU", cpu, 100 - cpu);
    }
    std::string digest = m.value("digest", "");
    if (digest.rfind("sha256:", 0) == 0) digest = digest.substr(7);
    std::string name = m.value("name", m.value("model", ""));
    std::vector<std::string> row = {name, digest.substr(0, 12), human_bytes(size), proc};
    if (any_context) row.push_back(number(m, "context_length") > 0 ? std::to_string(number(m, "context_length")) : "");
    row.push_back(until_text(m.value("expires_at", ""), now));
    rows.push_back(row);
  }
  // ollama's tablewriter layout: left aligned, no borders, four spaces between columns.
  std::vector<size_t> width(header.size(), 0);
  auto display_width = [](const std::string& s) {
    size_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
  };
  for (const auto& r : rows)
    for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], display_width(r[i]));
  std::string out;
  for (const auto& r : rows) {
    std::string l;
    for (size_t i = 0; i < r.size(); ++i) {
      l += r[i];
      if (i + 1 < r.size()) l += std::string(width[i] - display_width(r[i]) + 4, ' ');
    }
    while (!l.empty() && l.back() == ' ') l.pop_back();
    out += l + "\n";
  }
  return out;
}

}  // namespace vatic::cli

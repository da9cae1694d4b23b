// vatic create / list / show / rm / cp: thin wrappers over store/ (the server calls the same functions).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <memory>

#include <httplib.h>

#include "chat/format.h"
#include "chat/parser.h"
#include "chat/renderer.h"
#include "cli/cli.h"
#include "cli/client_api.h"
#include "modelfile/modelfile.h"
#include "store/store.h"
#include "util/error.h"

namespace vatic::cli {
namespace {

namespace fs = std::filesystem;

// A model being removed must not stay loaded in a running server (it would keep serving the deleted weights):
// ask the server, if one answers quickly, to unload it. Nothing happens when no server is running.
void unload_from_server(const std::string& name) {
  try {
    ServerAddress a = server_address_from_env();
    httplib::Client c(a.host, a.port);
    c.set_connection_timeout(0, 300000);
    c.set_read_timeout(30, 0);
    json body = {{"model", name}, {"prompt", ""}, {"keep_alive", 0}, {"stream", false}};
    c.Post("/api/generate", body.dump(), "application/json");
  } catch (const std::exception&) {
  }
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (b >= 1000 && u < 4) {
    b /= 1000;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} {}", b, units[u]) : fmt::format("{:.1f} {}", b, units[u]);
}

std::string human_count(int64_t n) {
  if (n >= 1000000000) return fmt::format("{:.1f}B", static_cast<double>(n) / 1e9);
  if (n >= 1000000) return fmt::format("{:.1f}M", static_cast<double>(n) / 1e6);
  if (n >= 1000) return fmt::format("{:.1f}K", static_cast<double>(n) / 1e3);
  return std::to_string(n);
}

std::string age(fs::file_time_type t) {
  auto now = fs::file_time_type::clock::now();
  auto s = std::chrono::duration_cast<std::chrono::seconds>(now - t).count();
  if (s < 60) return "Less than a minute ago";
  if (s < 3600) return fmt::format("{} minute{} ago", s / 60, s / 60 == 1 ? "" : "s");
  if (s < 86400) return fmt::format("{} hour{} ago", s / 3600, s / 3600 == 1 ? "" : "s");
  return fmt::format("{} day{} ago", s / 86400, s / 86400 == 1 ? "" : "s");
}

// Progress: a redrawn bar with bytes, rate and ETA on a terminal; plain lines (status changes) otherwise.
ProgressFn make_progress() {
  const bool tty = ::isatty(STDERR_FILENO);
  auto start = std::chrono::steady_clock::now();
  auto last_draw = std::make_shared<std::chrono::steady_clock::time_point>();
  auto last_percent = std::make_shared<int>(-1);
  return [=](const CreateProgress& p) {
    auto now = std::chrono::steady_clock::now();
    double secs = std::chrono::duration<double>(now - start).count();
    double rate = secs > 0 ? static_cast<double>(p.completed) / secs : 0;
    int percent = p.total ? static_cast<int>(100.0 * static_cast<double>(p.completed) / static_cast<double>(p.total)) : 100;
    if (tty) {
      bool final = p.status == "success";
      if (!final && now - *last_draw < std::chrono::milliseconds(100)) return;
      *last_draw = now;
      const int width = 30;
      int filled = width * percent / 100;
      double eta = rate > 0 ? static_cast<double>(p.total - p.completed) / rate : 0;
      std::string status = p.status.size() > 48 ? "..." + p.status.substr(p.status.size() - 45) : p.status;
      std::fprintf(stderr, "\r\033[K%3d%% [%s%s] %s/%s %s/s ETA %.0fs %s", percent, std::string(filled, '#').c_str(),
                   std::string(width - filled, ' ').c_str(), human_bytes(static_cast<double>(p.completed)).c_str(),
                   human_bytes(static_cast<double>(p.total)).c_str(), human_bytes(rate).c_str(), eta,
                   status.c_str());
      if (final) std::fprintf(stderr, "\n");
    } else {
      // one line per 10% and for the milestones
      bool milestone = p.status == "success" || p.status == "writing manifest";
      if (!milestone && percent / 10 == *last_percent / 10) return;
      *last_percent = percent;
      std::fprintf(stderr, "%s %d%% (%s of %s, %s/s)\n", p.status.c_str(), percent,
                   human_bytes(static_cast<double>(p.completed)).c_str(),
                   human_bytes(static_cast<double>(p.total)).c_str(), human_bytes(rate).c_str());
    }
    std::fflush(stderr);
  };
}

void print_show(const ModelInfo& i) {
  std::printf("  Model\n");
  std::printf("    %-20s %s\n", "architecture", i.architecture.c_str());
  std::printf("    %-20s %s\n", "parameters", human_count(i.parameter_count).c_str());
  std::printf("    %-20s %lld\n", "context length", static_cast<long long>(i.context_length));
  std::printf("    %-20s %lld\n", "embedding length", static_cast<long long>(i.embedding_length));
  std::printf("    %-20s %s\n", "quantization", i.quantization.c_str());
  if (i.kv_bytes_per_token > 0)
    std::printf("    %-20s %lld bytes\n", "kv cache / token", static_cast<long long>(i.kv_bytes_per_token));
  if (i.draft.present) {
    std::printf("\n  Draft\n");
    std::printf("    %-20s %s\n", "architecture", i.draft.architecture.c_str());
    std::printf("    %-20s %s\n", "parameters", human_count(i.draft.parameter_count).c_str());
    std::printf("    %-20s %s\n", "quantization", i.draft.quantization.c_str());
  }
  std::printf("\n  Capabilities\n");
  for (const auto& c : i.capabilities) std::printf("    %s\n", c.c_str());
  if (!i.params.empty()) {
    std::printf("\n  Parameters\n");
    for (const auto& [k, v] : i.params.items()) {
      if (v.is_array())
        for (const auto& s : v) std::printf("    %-20s %s\n", k.c_str(), s.dump().c_str());
      else
        std::printf("    %-20s %s\n", k.c_str(), v.dump().c_str());
    }
  }
  if (!i.system.empty()) std::printf("\n  System\n    %s\n", i.system.c_str());
  for (const auto& l : i.licenses) std::printf("\n  License\n    %s\n", l.substr(0, l.find('\n', 200)).c_str());
}

}  // namespace

void register_store_commands(CLI::App& app) {
  // create
  struct CreateArgs {
    std::string name, file = "Modelfile", quantize, draft_quantize;
    int group = 64;
  };
  auto ca = std::make_shared<CreateArgs>();
  auto* create = app.add_subcommand("create", "Create a model from a Modelfile");
  create->add_option("name", ca->name, "Model name (name[:tag])")->required();
  create->add_option("-f,--file", ca->file, "Modelfile (default ./Modelfile)");
  create->add_option("-q,--quantize", ca->quantize, "Quantize the model: int8, int4 (aliases q8, q4)");
  create->add_option("--draft-quantize,--quantize-draft", ca->draft_quantize, "Quantize the DRAFT model: int8, int4");
  create->add_option("--group-size", ca->group, "Quantization group size (64 or 32)");
  create->callback([ca]() {
    Modelfile mf = read_modelfile(ca->file);
    // Unknown chat formats are refused here rather than stored (RENDERER raw marks a plain completion model).
    if (!mf.renderer.empty() && mf.renderer != "raw") chat::make_renderer(mf.renderer);
    if (!mf.parser.empty()) chat::make_parser(mf.parser);
    ModelStore store(ModelStore::default_root());
    CreateOptions opt;
    opt.quantize = ca->quantize;
    opt.draft_quantize = ca->draft_quantize;
    opt.group_size = ca->group;
    opt.progress = make_progress();
    ModelInfo info = store.create(ca->name, mf, opt);
    std::printf("created %s (%s, %s%s)\n", info.name.c_str(), info.quantization.c_str(),
                human_bytes(static_cast<double>(info.size)).c_str(),
                info.draft.present ? (", draft " + info.draft.quantization).c_str() : "");
  });

  // list
  auto* list = app.add_subcommand("list", "List models");
  list->alias("ls");
  list->callback([]() {
    ModelStore store(ModelStore::default_root());
    std::printf("%-40s %-14s %-10s %s\n", "NAME", "ID", "SIZE", "MODIFIED");
    for (const auto& m : store.list())
      std::printf("%-40s %-14s %-10s %s\n", m.name.c_str(), m.id().c_str(),
                  human_bytes(static_cast<double>(m.size)).c_str(), age(m.modified).c_str());
  });

  // show
  auto show_name = std::make_shared<std::string>();
  auto show_modelfile = std::make_shared<bool>(false);
  auto* show = app.add_subcommand("show", "Show information for a model");
  show->add_option("name", *show_name, "Model name")->required();
  show->add_flag("--modelfile", *show_modelfile, "Print an equivalent Modelfile");
  show->callback([show_name, show_modelfile]() {
    ModelStore store(ModelStore::default_root());
    if (*show_modelfile) {
      std::printf("# Modelfile of %s (FROM the model itself keeps its weights and its draft)\n%s",
                  ModelName::parse(*show_name).str().c_str(), format_modelfile(store.modelfile(*show_name)).c_str());
      return;
    }
    print_show(store.show(*show_name));
  });

  // rm
  auto rm_names = std::make_shared<std::vector<std::string>>();
  auto* rm = app.add_subcommand("rm", "Remove models");
  rm->add_option("names", *rm_names, "Model names")->required();
  rm->callback([rm_names]() {
    ModelStore store(ModelStore::default_root());
    for (const auto& n : *rm_names) {
      unload_from_server(n);
      store.remove(n);
      std::printf("deleted '%s'\n", ModelName::parse(n).str().c_str());
    }
  });

  // cp
  auto cp_args = std::make_shared<std::pair<std::string, std::string>>();
  auto* cp = app.add_subcommand("cp", "Copy a model");
  cp->add_option("source", cp_args->first, "Source model")->required();
  cp->add_option("destination", cp_args->second, "Destination model")->required();
  cp->callback([cp_args]() {
    ModelStore store(ModelStore::default_root());
    store.copy(cp_args->first, cp_args->second);
    std::printf("copied '%s' to '%s'\n", ModelName::parse(cp_args->first).str().c_str(),
                ModelName::parse(cp_args->second).str().c_str());
  });
}

}  // namespace vatic::cli

#include "engine/engine.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "backend/backend.h"
#include "models/loader.h"

namespace vatic {

// The prefix cache lives where the KV cache lives: its budget follows that device's memory.
static size_t default_prefix_budget(Backend& be) {
  if (const char* e = std::getenv("VATIC_PREFIX_CACHE_MB")) return static_cast<size_t>(std::atoll(e)) << 20;
  const DeviceMemory m = be.memory();
  if (be.device().is_cpu()) {
    // A quarter of physical memory, at most 8 GiB.
    size_t total = m.total ? m.total : (size_t(8) << 30);
    return std::min(total / 4, size_t(8) << 30);
  }
  // On an accelerator: a quarter of what is free once the model is loaded, at most 8 GiB.
  return std::min(m.free / 4, size_t(8) << 30);
}

static std::string gb(double bytes) { return fmt::format("{:.2f} GB", bytes / 1e9); }

Engine::Engine(const ModelSource& source, Device device, EngineOptions options,
               std::function<void(const std::string&)> log)
    : source_(source), device_(device), options_(options) {
  executor_.run([&] {
    Backend& be = backend_for(device_);
    be.bind_thread();
    const uint64_t weight_bytes = open_weights(source_)->total_bytes();
    if (!device_.is_cpu()) {
      const DeviceMemory m = be.memory();
      if (weight_bytes > m.free)
        throw InvalidInput(fmt::format("{} does not fit {}: its weights take {} and the device has {} free of {}",
                                       source_.name, be.description(), gb(weight_bytes), gb(m.free), gb(m.total)));
    }
    int last_decile = -1;
    auto progress = [&](uint64_t done, uint64_t total) {
      const int decile = total ? static_cast<int>(done * 10 / total) : 10;
      if (!log || decile == last_decile) return;
      last_decile = decile;
      log(fmt::format("loading {} onto {}: {}% ({} of {})", source_.name, be.description(), decile * 10, gb(done),
                      gb(total)));
    };
    model_ = load_language_model(source_, device_, progress);
    if (options_.use_draft) {
      drafter_ = load_drafter(*model_, source_.draft.get());
      has_drafter_ = drafter_ != nullptr;
    }
    if (!source_.tokenizer.empty()) tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::load(source_.tokenizer));
    info_ = model_->info();
    num_ctx_ = options_.num_ctx > 0 ? options_.num_ctx : std::min<int64_t>(info_.context_length, 8192);
    if (info_.context_length > 0) num_ctx_ = std::min(num_ctx_, info_.context_length);
    {
      // The KV cache grows to num_ctx tokens: refuse now what cannot fit (on the CPU: the machine's memory; the
      // weights there are mapped files, not allocations).
      const DeviceMemory m = be.memory();
      const double kv = static_cast<double>(info_.kv_bytes_per_token) * static_cast<double>(num_ctx_);
      if (kv > static_cast<double>(device_.is_cpu() ? m.total : m.free))
        throw InvalidInput(fmt::format(
            "{} does not fit {}: a KV cache of {} tokens takes {}, more than the {} {} ({} of weights loaded); "
            "lower num_ctx",
            source_.name, be.description(), num_ctx_, gb(kv), gb(device_.is_cpu() ? m.total : m.free),
            device_.is_cpu() ? "of memory on this machine" : "free on the device", gb(info_.weight_bytes)));
    }
    live_ = model_->new_state();
    prefix_ = std::make_unique<PrefixCache>(options_.prefix_cache_bytes ? options_.prefix_cache_bytes
                                                                        : default_prefix_budget(be));
    if (log)
      log(fmt::format("{} loaded on {}: {} of weights{}", source_.name, be.description(), gb(info_.weight_bytes),
                      device_.is_cpu() ? "" : fmt::format(", {} of device memory free", gb(be.memory().free))));
    if (has_drafter_) depth_ = std::make_unique<DepthController>(options_.max_draft_depth);
  });
}

Engine::~Engine() {
  try {
    executor_.run([&] {
      live_.reset();
      prefix_.reset();
      drafter_.reset();
      model_.reset();
    });
  } catch (...) {
  }
  executor_.stop();
}

std::vector<int32_t> Engine::tokenize(const std::string& text, bool add_special_tokens) const {
  if (!tokenizer_) throw InvalidInput(fmt::format("{} has no tokenizer", source_.name));
  return tokenizer_->encode(text, add_special_tokens);
}

std::string Engine::detokenize(const std::vector<int32_t>& ids) const {
  if (!tokenizer_) throw InvalidInput(fmt::format("{} has no tokenizer", source_.name));
  return tokenizer_->decode(ids, false);
}

GenerateStats Engine::generate(const std::vector<int32_t>& prompt, const GenerateOptions& options,
                               const TokenCallback& on_token) {
  return executor_.run([&] {
    if (static_cast<int64_t>(prompt.size()) >= num_ctx_)
      throw InvalidInput(fmt::format("the prompt is {} tokens, over the context length of {}", prompt.size(), num_ctx_));
    // Longest prefix shared with the live sequence, short of the whole prompt: the last prompt token is always
    // evaluated (its logits choose the first new token), so the state must be able to rewind to before it. A
    // sliding cache can hold the window for one length and have lost it for the length before.
    size_t lcp = 0;
    while (lcp + 1 < prompt.size() && lcp < live_tokens_.size() && live_tokens_[lcp] == prompt[lcp]) lcp++;
    // ...or a longer one from the prefix cache.
    auto m = prefix_->lookup(prompt);
    if (m.snapshot && static_cast<size_t>(m.length) > lcp && m.length < static_cast<int64_t>(prompt.size())) {
      // A drafter with state of its own followed the old live sequence: keep only what the restored one shares.
      if (drafter_) drafter_->rewind(static_cast<int64_t>(lcp));
      live_->restore(m.snapshot);
      live_tokens_.assign(prompt.begin(), prompt.begin() + m.length);
      lcp = static_cast<size_t>(m.length);
    }
    if (lcp < live_tokens_.size()) {
      if (live_->can_rewind_to(static_cast<int64_t>(lcp))) {
        live_->rewind(static_cast<int64_t>(lcp));
      } else {
        live_ = model_->new_state();
        lcp = 0;
      }
      live_tokens_.resize(lcp);
    }
    // The engine's context window bounds generation too.
    GenerateOptions o = options;
    const int64_t room = num_ctx_ - static_cast<int64_t>(prompt.size());
    if (o.max_tokens < 0 || o.max_tokens > room) o.max_tokens = static_cast<int>(room);
    Generator gen(*model_, drafter_.get(), options.draft_depth < 0 ? depth_.get() : nullptr);
    std::vector<int32_t> produced;
    live_tokens_ = prompt;
    GenerateStats stats;
    try {
      stats = gen.generate(*live_, prompt, o, [&](const TokenEvent& ev) {
        produced.push_back(ev.token);
        return on_token(ev);
      });
    } catch (...) {
      live_ = model_->new_state();  // a failed forward may leave caches half-written
      live_tokens_.clear();
      throw;
    }
    // The state holds the prompt and every produced token but the last (it was never run).
    live_tokens_.insert(live_tokens_.end(), produced.begin(), produced.end());
    live_tokens_.resize(static_cast<size_t>(live_->length()));
    if (live_->length() > 0) {
      auto snap = live_->snapshot();
      prefix_->insert(live_tokens_, snap, live_->snapshot_bytes(snap));
    }
    kv_bytes_ = live_->bytes();
    return stats;
  });
}

json Engine::status() const {
  return {{"weights_bytes", info_.weight_bytes},
          {"kv_bytes", kv_bytes_.load()},
          {"kv_bytes_per_token", info_.kv_bytes_per_token},
          {"prefix_cache_bytes", prefix_ ? prefix_->bytes() : 0},
          {"prefix_cache_budget", prefix_ ? prefix_->budget() : 0},
          {"context_length", num_ctx_},
          {"device", device_.str()},
          {"drafter", has_drafter_}};
}

void Engine::reset() {
  executor_.run([&] {
    live_ = model_->new_state();
    live_tokens_.clear();
    prefix_->clear();
    kv_bytes_ = 0;
  });
}

}  // namespace vatic

#include "server/scheduler.h"

#include <cstdio>

#include "server/util.h"

namespace vatic::server {

using SteadyClock = std::chrono::steady_clock;

Scheduler::Scheduler(SchedulerOptions options) : opts_(std::move(options)) {
  reaper_ = std::thread([this] { reap(); });
}

Scheduler::~Scheduler() { shutdown(); }

void Scheduler::shutdown() {
  std::vector<std::shared_ptr<Slot>> all;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopping_) return;
    stopping_ = true;
    for (auto& [n, s] : slots_) all.push_back(s);
    slots_.clear();
    cv_.notify_all();
  }
  for (auto& s : all) stop_slot(s);
  if (reaper_.joinable()) reaper_.join();
}

void Scheduler::stop_slot(const std::shared_ptr<Slot>& slot) {
  if (slot->proc) {
    if (opts_.debug) std::fprintf(stderr, "scheduler: unloading %s (pid %d)\n", slot->name.c_str(), slot->proc->pid());
    slot->proc->stop();
  }
}

std::unique_ptr<Scheduler::Lease> Scheduler::acquire(const std::string& model, std::optional<double> keep_alive,
                                                     int64_t num_ctx, const std::string& digest) {
  while (true) {
    auto lease = acquire_once(model, keep_alive, num_ctx, digest);
    {
      std::lock_guard<std::mutex> lk(mu_);
      auto& s = lease->slot_;
      if (!s->dead && !(s->proc && s->proc->exited())) return lease;
      // The runner died while this request waited for it (the request before failed with it): release and go
      // round again, which starts a fresh runner once nobody holds the dead one.
      s->dead = true;
    }
    if (opts_.debug) std::fprintf(stderr, "scheduler: runner for %s died while a request waited; retrying\n", model.c_str());
  }
}

std::unique_ptr<Scheduler::Lease> Scheduler::acquire_once(const std::string& model, std::optional<double> keep_alive,
                                                          int64_t num_ctx, const std::string& digest) {
  std::unique_lock<std::mutex> lk(mu_);
  if (stopping_) throw HttpError(503, "server is shutting down");
  if (pending_ >= opts_.max_queue) throw HttpError(503, kBusyMessage);
  pending_++;
  auto t0 = SteadyClock::now();
  std::shared_ptr<Slot> slot;
  bool loaded_here = false;
  try {
    while (true) {
      if (stopping_) throw HttpError(503, "server is shutting down");
      auto it = slots_.find(model);
      if (it != slots_.end()) {
        auto& s = it->second;
        bool mismatch = (num_ctx > 0 && !s->loading && s->num_ctx != num_ctx) ||
                        (!digest.empty() && !s->loading && !s->digest.empty() && s->digest != digest);
        bool gone = s->dead || (s->proc && !s->loading && s->proc->exited());
        if ((gone || mismatch) && s->refs == 0) {
          auto old = s;
          slots_.erase(it);
          lk.unlock();
          stop_slot(old);
          lk.lock();
          continue;
        }
        if (gone) {  // someone still holds it; wait for them to notice
          cv_.wait_for(lk, std::chrono::milliseconds(100));
          continue;
        }
        slot = s;
        slot->refs++;
        break;
      }
      // Make room: evict the least recently used idle runner.
      if (static_cast<int>(slots_.size()) >= opts_.max_loaded) {
        std::shared_ptr<Slot> victim;
        for (auto& [n, s] : slots_)
          if (s->refs == 0 && !s->loading && (!victim || s->last_used < victim->last_used)) victim = s;
        if (!victim) {
          cv_.wait(lk);
          continue;
        }
        slots_.erase(victim->name);
        lk.unlock();
        stop_slot(victim);
        lk.lock();
        continue;
      }
      slot = std::make_shared<Slot>();
      slot->name = model;
      slot->num_ctx = num_ctx;
      slot->digest = digest;
      slot->refs = 1;
      slot->keep_alive = opts_.default_keep_alive;
      slots_[model] = slot;
      loaded_here = true;
      lk.unlock();
      std::string error;
      std::shared_ptr<RunnerProcess> proc;
      try {
        std::vector<std::string> args = {"runner", "--model", model, "--port", "0", "--exit-on-stdin-eof"};
        if (num_ctx > 0) {
          args.push_back("--ctx");
          args.push_back(std::to_string(num_ctx));
        }
        proc = RunnerProcess::spawn(opts_.runner_exe, args, "runner " + model, true);
        if (!proc->wait_ready(opts_.load_timeout, &error)) proc.reset();
      } catch (const std::exception& e) {
        error = e.what();
        proc.reset();
      }
      lk.lock();
      slot->loading = false;
      if (proc) {
        slot->proc = proc;
        if (opts_.debug)
          std::fprintf(stderr, "scheduler: loaded %s (pid %d, port %d)\n", model.c_str(), proc->pid(), proc->port());
      } else {
        slot->failed = true;
        slot->error = error;
        slots_.erase(model);
      }
      cv_.notify_all();
      break;
    }
    cv_.wait(lk, [&] { return !slot->loading; });
    if (slot->failed) {
      std::string msg = fmt::format("failed to load model '{}': {}", model, slot->error);
      slot->refs--;
      throw HttpError(500, msg);
    }
    if (keep_alive) slot->keep_alive = *keep_alive;
  } catch (...) {
    pending_--;
    cv_.notify_all();
    throw;
  }
  lk.unlock();
  auto lease = std::unique_ptr<Lease>(new Lease(this, slot));
  slot->run_mu.lock();  // one request at a time per runner; this is where requests queue
  if (loaded_here) lease->load_seconds_ = std::chrono::duration<double>(SteadyClock::now() - t0).count();
  if (slot->proc) lease->output_mark_ = slot->proc->output_mark();
  return lease;
}

Scheduler::Lease::~Lease() {
  slot_->run_mu.unlock();
  sched_->release(slot_);
}

int Scheduler::Lease::port() const { return slot_->proc->port(); }
pid_t Scheduler::Lease::pid() const { return slot_->proc->pid(); }
const std::string& Scheduler::Lease::model() const { return slot_->name; }

std::string Scheduler::Lease::fail(const std::string& what) {
  auto& p = slot_->proc;
  // Give the reaper a moment to see a crash, so the message can say how the runner ended.
  bool exited = p->wait_exit(1.0);
  if (!exited) p->kill_now();
  // After a crash the last line usually says why; a hung runner's last line is just its last log, and so is a
  // killed runner's (a signal leaves no message of its own): those quote only lines that report an error.
  const bool by_signal = exited && p->exit_description().find("signal") != std::string::npos;
  std::string last = p->last_error(exited && !by_signal, output_mark_);
  std::string msg = exited ? fmt::format("runner for model '{}' stopped unexpectedly ({})", slot_->name,
                                         p->exit_description())
                           : fmt::format("runner for model '{}' failed: {}", slot_->name, what);
  if (!last.empty()) msg += ": " + last;
  {
    std::lock_guard<std::mutex> lk(sched_->mu_);
    slot_->dead = true;
  }
  std::fprintf(stderr, "scheduler: %s\n", msg.c_str());
  return msg;
}

void Scheduler::release(const std::shared_ptr<Slot>& slot) {
  std::shared_ptr<Slot> to_stop;
  {
    std::lock_guard<std::mutex> lk(mu_);
    slot->refs--;
    pending_--;
    slot->last_used = SteadyClock::now();
    if (slot->refs == 0 && (slot->dead || slot->keep_alive == 0)) {
      auto it = slots_.find(slot->name);
      if (it != slots_.end() && it->second == slot) slots_.erase(it);
      to_stop = slot;
    }
    cv_.notify_all();
  }
  if (to_stop) stop_slot(to_stop);
}

bool Scheduler::unload(const std::string& model) {
  std::shared_ptr<Slot> slot;
  {
    std::unique_lock<std::mutex> lk(mu_);
    auto it = slots_.find(model);
    if (it == slots_.end()) return false;
    slot = it->second;
    cv_.wait(lk, [&] { return slot->refs == 0 || stopping_; });
    auto it2 = slots_.find(model);
    if (it2 != slots_.end() && it2->second == slot) slots_.erase(it2);
    cv_.notify_all();
  }
  stop_slot(slot);
  return true;
}

std::vector<LoadedModel> Scheduler::loaded() const {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<LoadedModel> out;
  auto now_sys = std::chrono::system_clock::now();
  auto now = SteadyClock::now();
  for (const auto& [n, s] : slots_) {
    if (s->loading || !s->proc || s->dead) continue;
    LoadedModel m;
    m.name = n;
    m.pid = s->proc->pid();
    m.port = s->proc->port();
    m.num_ctx = s->num_ctx;
    m.busy = s->refs > 0;
    m.forever = s->keep_alive < 0;
    auto base = m.busy ? now : s->last_used;
    double ka = m.forever ? 0 : s->keep_alive;
    auto exp = base + std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(ka));
    m.expires_at = now_sys + std::chrono::duration_cast<std::chrono::system_clock::duration>(exp - now);
    if (m.forever) m.expires_at = now_sys + std::chrono::hours(24 * 365 * 100);
    out.push_back(m);
  }
  return out;
}

void Scheduler::reap() {
  std::unique_lock<std::mutex> lk(mu_);
  while (!stopping_) {
    cv_.wait_for(lk, std::chrono::milliseconds(250));
    if (stopping_) break;
    auto now = SteadyClock::now();
    std::vector<std::shared_ptr<Slot>> expired;
    for (auto it = slots_.begin(); it != slots_.end();) {
      auto& s = it->second;
      bool idle = s->refs == 0 && !s->loading;
      bool gone = s->dead || (s->proc && s->proc->exited());
      bool timed_out = s->keep_alive >= 0 &&
                       now - s->last_used >= std::chrono::duration<double>(s->keep_alive);
      if (idle && (gone || timed_out)) {
        if (gone && !s->dead)
          std::fprintf(stderr, "scheduler: runner for %s exited (%s)\n", s->name.c_str(),
                       s->proc->exit_description().c_str());
        expired.push_back(s);
        it = slots_.erase(it);
      } else {
        ++it;
      }
    }
    if (!expired.empty()) {
      lk.unlock();
      for (auto& s : expired) stop_slot(s);
      lk.lock();
      cv_.notify_all();
    }
  }
}

}  // namespace vatic::server

#include "distributed/rendezvous.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <set>
#include <thread>
#include <utility>

namespace dflow::distributed {
namespace {

constexpr char kRendezvousTask[] = "/job:rendezvous/task:0";

void LogTo(const std::function<void(std::string_view)>& log, const std::string& line) {
  if (log) {
    log(line);
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
}

std::string WhoJoined(const RegisterRequest& r) {
  std::string rank = r.rank >= 0 ? fmt::format("rank {}", r.rank) : std::string("a worker");
  return fmt::format("{} at {}{}", rank, r.address,
                     r.launcher.empty() ? "" : " (" + r.launcher + ")");
}

}  // namespace

Result<std::unique_ptr<RendezvousServer>> RendezvousServer::Create(RendezvousOptions options) {
  if (options.expected_workers < 0) {
    return InvalidArgument("the rendezvous cannot wait for {} workers", options.expected_workers);
  }
  if (options.listen.empty()) return InvalidArgument("the rendezvous has no address to listen on");
  auto server = std::unique_ptr<RendezvousServer>(new RendezvousServer(std::move(options)));
  transport::TransportOptions t;
  t.task = kRendezvousTask;
  t.token = server->options_.token;
  t.listen_address = server->options_.listen;
  t.log = server->options_.log;
  auto made = transport::TransportRegistry::Global().Create(server->options_.transport, t);
  if (!made.ok()) return made.status().WithPrefix("the rendezvous: ");
  server->transport_ = std::move(made).value();
  {
    MutexLock lock(server->mu_);
    server->expected_ = server->options_.expected_workers;
  }
  RendezvousServer* self = server.get();
  server->transport_->SetCallHandler([self](const transport::Transport::CallInfo& call,
                                            std::string payload,
                                            transport::Transport::Reply reply) {
    self->Handle(call, std::move(payload), std::move(reply));
  });
  return server;
}

RendezvousServer::~RendezvousServer() {
  if (transport_ == nullptr) return;
  transport_->SetCallHandler(nullptr);
  std::vector<transport::Transport::Reply> waiting;
  {
    MutexLock lock(mu_);
    closed_ = true;
    for (Joined& j : joined_) waiting.push_back(std::move(j.reply));
    joined_.clear();
  }
  for (auto& reply : waiting) reply(Unavailable("the master closed its rendezvous"));
  transport_.reset();
}

std::string RendezvousServer::address() const { return transport_->listen_address(); }

void RendezvousServer::Log(const std::string& line) const { LogTo(options_.log, line); }

std::string RendezvousServer::Describe() const {
  if (joined_.empty()) return "none";
  std::string out;
  for (const Joined& j : joined_) out += (out.empty() ? "" : ", ") + WhoJoined(j.request);
  return out;
}

void RendezvousServer::DropGone() {
  const std::vector<std::string> alive = transport_->peers();
  std::erase_if(joined_, [&](const Joined& j) {
    if (std::find(alive.begin(), alive.end(), j.from) != alive.end()) return false;
    Log(fmt::format("rendezvous at {}: {} left before the cluster was complete", address(),
                    WhoJoined(j.request)));
    return true;
  });
}

std::vector<transport::Transport::Reply> RendezvousServer::Fail(const Status& s) {
  closed_ = true;
  if (error_.ok()) error_ = s;
  std::vector<transport::Transport::Reply> waiting;
  for (Joined& j : joined_) waiting.push_back(std::move(j.reply));
  joined_.clear();
  changed_.NotifyAll();
  return waiting;
}

void RendezvousServer::Handle(const transport::Transport::CallInfo& call, std::string payload,
                              transport::Transport::Reply reply) {
  if (call.method != static_cast<uint16_t>(Method::kRegister)) {
    reply(Unimplemented("this is a master's rendezvous: it only takes Register requests"));
    return;
  }
  auto request = DecodeRegisterRequest(payload);
  if (!request.ok()) {
    Log(fmt::format("rendezvous at {}: refused {}: {}", address(), call.from_task,
                    request.status().message()));
    reply(request.status());
    return;
  }
  const std::string who = WhoJoined(*request);
  Status refused;
  std::vector<transport::Transport::Reply> failed;  // told `refused` too: the cluster is wrong
  int joined = 0, expected = 0;
  {
    MutexLock lock(mu_);
    DropGone();
    if (closed_) {
      refused = !error_.ok() ? error_
                             : FailedPrecondition("the master at {} already has its {} workers",
                                                  address(), expected_);
    } else if (expected_ == 0 && request->world_size == 0) {
      refused = InvalidArgument(
          "the master was not told how many workers to wait for, and {} has no world size from "
          "a launcher (give the master the number of workers)",
          who);
      failed = Fail(refused);
    } else {
      if (expected_ == 0) expected_ = request->world_size;
      if (request->world_size > 0 && request->world_size != expected_) {
        refused = InvalidArgument("{} says the world has {} workers, but the master waits for {}",
                                  who, request->world_size, expected_);
      } else if (request->rank >= expected_) {
        refused = InvalidArgument("{} is past the {} workers the master waits for", who, expected_);
      }
      for (const Joined& j : joined_) {
        if (!refused.ok()) break;
        if (request->rank >= 0 && j.request.rank == request->rank) {
          refused = InvalidArgument("two workers say they are rank {}: {} and {}", request->rank,
                                    WhoJoined(j.request), who);
        } else if (j.request.address == request->address) {
          refused = InvalidArgument("two workers say they listen at {}", request->address);
        }
      }
      if (!refused.ok()) {
        failed = Fail(refused);
      } else {
        joined_.push_back({call.from_task, std::move(request).value(), std::move(reply)});
        joined = static_cast<int>(joined_.size());
        expected = expected_;
        changed_.NotifyAll();
      }
    }
  }
  if (!refused.ok()) {
    Log(fmt::format("rendezvous at {}: refused {}: {}", address(), who, refused.message()));
    reply(refused);
    for (auto& r : failed) r(refused);
    return;
  }
  Log(fmt::format("rendezvous at {}: {} joined ({} of {})", address(), who, joined, expected));
}

Result<ClusterSpec> RendezvousServer::WaitForWorkers() {
  const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
  MutexLock lock(mu_);
  if (closed_ && error_.ok()) return FailedPrecondition("WaitForWorkers was called before");
  while (true) {
    if (!error_.ok()) return error_;
    DropGone();
    if (expected_ > 0 && static_cast<int>(joined_.size()) >= expected_) break;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      std::set<int> taken;
      int unranked = 0;
      for (const Joined& j : joined_) {
        if (j.request.rank >= 0) {
          taken.insert(j.request.rank);
        } else {
          ++unranked;
        }
      }
      std::string missing;
      if (expected_ > 0) {
        for (int r = 0; r < expected_; ++r) {
          if (!taken.count(r)) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        }
      }
      const auto seconds =
          std::chrono::duration_cast<std::chrono::duration<double>>(options_.timeout).count();
      Status late = DeadlineExceeded(
          "{} of {} workers joined the rendezvous at {} within {:g} s; missing: {}{}; joined: "
          "{}",
          joined_.size(), expected_ > 0 ? std::to_string(expected_) : std::string("?"), address(),
          seconds, expected_ > 0 ? "rank " + missing : "the number to wait for",
          unranked > 0 ? fmt::format(" (of which {} may come without a rank)", unranked) : "",
          Describe());
      std::vector<transport::Transport::Reply> waiting = Fail(late);
      lock.Unlock();
      for (auto& r : waiting) r(late);
      return late;
    }
    // Wakes to notice workers that left.
    changed_.WaitUntil(
        mu_, std::min(deadline, now + std::chrono::milliseconds(200)), [&]() DFLOW_REQUIRES(mu_) {
          return !error_.ok() || (expected_ > 0 && static_cast<int>(joined_.size()) >= expected_);
        });
  }
  // Workers without a rank take the lowest ranks left, in the order they came.
  std::vector<Joined*> by_rank(expected_, nullptr);
  for (Joined& j : joined_) {
    if (j.request.rank >= 0) by_rank[j.request.rank] = &j;
  }
  int next = 0;
  for (Joined& j : joined_) {
    if (j.request.rank >= 0) continue;
    while (by_rank[next] != nullptr) ++next;
    j.request.rank = next;
    by_rank[next] = &j;
  }
  ClusterSpec cluster;
  std::vector<std::pair<transport::Transport::Reply, RegisterReply>> answers;
  for (Joined* j : by_rank) {
    cluster.jobs["worker"].push_back(j->request.address);
    answers.emplace_back(
        std::move(j->reply),
        RegisterReply{fmt::format("/job:worker/task:{}", j->request.rank), expected_});
  }
  closed_ = true;
  joined_.clear();
  lock.Unlock();
  for (auto& [reply, answer] : answers) reply(Encode(answer));
  return cluster;
}

Result<ClusterSpec> GatherWorkers(RendezvousOptions options,
                                  std::unique_ptr<RendezvousServer>* server) {
  const int n = options.expected_workers;
  ASSIGN_OR_RETURN(*server, RendezvousServer::Create(std::move(options)));
  std::printf("waiting for %s workers at %s\n",
              n > 0 ? std::to_string(n).c_str() : "the launcher's", (*server)->address().c_str());
  std::fflush(stdout);
  return (*server)->WaitForWorkers();
}

Result<std::unique_ptr<Registration>> Registration::Join(RegisterOptions options) {
  const auto deadline = std::chrono::steady_clock::now() + options.timeout;
  auto r = std::unique_ptr<Registration>(new Registration);
  transport::TransportOptions t;
  // A name of its own for the registration (two workers of one rank must not replace each
  // other's connection at the master, which refuses the second instead).
  std::random_device rd;
  t.task = fmt::format("/job:joining/task:{}", rd() % 1'000'000'000u);
  t.token = options.token;
  t.log = options.log;
  t.connect_timeout = std::chrono::seconds(5);
  t.reach = {options.master};
  ASSIGN_OR_RETURN(r->transport_,
                   transport::TransportRegistry::Global().Create(options.transport, t));
  SetReplyLimits(*r->transport_);
  auto pause = std::chrono::milliseconds(100);
  bool told = false;
  while (true) {
    auto connected = r->transport_->Connect(options.master);
    if (connected.ok()) {
      r->master_task_ = *connected;
      break;
    }
    const StatusCode code = connected.status().code();
    if (code != StatusCode::kUnavailable) {
      return connected.status().WithPrefix(
          fmt::format("joining the master at {}: ", options.master));
    }
    if (std::chrono::steady_clock::now() + pause >= deadline) {
      return Unavailable("no master answered at {} within {} ms (last: {})", options.master,
                         options.timeout.count(), connected.status().message());
    }
    if (!told) {
      LogTo(options.log, fmt::format("waiting for the master at {} ({})", options.master,
                                     connected.status().message()));
      told = true;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(2000));
  }
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  auto answer =
      r->transport_->Call(r->master_task_, static_cast<uint16_t>(Method::kRegister),
                          Encode(options.request), std::max(left, std::chrono::milliseconds(1)));
  if (!answer.ok()) {
    return Status(answer.status().code(),
                  fmt::format("the master at {}: {}", options.master, answer.status().message()));
  }
  ASSIGN_OR_RETURN(r->reply_, DecodeRegisterReply(*answer));
  return r;
}

bool Registration::master_gone() const {
  const std::vector<std::string> peers = transport_->peers();
  return std::find(peers.begin(), peers.end(), master_task_) == peers.end();
}

}  // namespace dflow::distributed

#include "distributed/elastic.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

#include "ops/array_ops.h"

namespace dflow::distributed {

ElasticReplicas::ElasticReplicas(Graph single, ops::ReplicateOptions replicate,
                                 DistributedOptions cluster, SessionOptions session_options,
                                 ElasticOptions options)
    : single_(std::move(single)),
      replicate_(std::move(replicate)),
      cluster_(std::move(cluster)),
      session_options_(std::move(session_options)),
      options_(std::move(options)) {
  auto job = cluster_.cluster.jobs.find(options_.job);
  if (job != cluster_.cluster.jobs.end()) all_ = job->second;
}

Result<Session*> ElasticReplicas::Start() {
  if (replicate_.mode != ops::ReplicateOptions::Mode::kSync || replicate_.backup_workers > 0 ||
      replicate_.feed_shards) {
    return InvalidArgument(
        "ElasticReplicas: only synchronous replicas fed whole batches are elastic (asynchronous "
        "ones, backup workers and fed shards name each replica's feeds)");
  }
  if (all_.empty()) {
    return InvalidArgument("ElasticReplicas: the cluster has no tasks of job '{}'", options_.job);
  }
  return Build(all_);
}

Result<Session*> ElasticReplicas::Build(const std::vector<std::string>& workers) {
  session_.reset();
  // Every worker keeps its task index; those left out leave a gap.
  DistributedOptions cluster = cluster_;
  std::vector<std::string>& sparse = cluster.cluster.jobs[options_.job];
  sparse.assign(all_.size(), "");
  ops::ReplicateOptions replicate = replicate_;
  replicate.devices.clear();
  for (size_t t = 0; t < all_.size(); ++t) {
    if (std::find(workers.begin(), workers.end(), all_[t]) == workers.end()) continue;
    sparse[t] = all_[t];
    replicate.devices.push_back(fmt::format("/job:{}/task:{}/device:CPU:0", options_.job, t));
  }
  ASSIGN_OR_RETURN(replicate.hosts, ReplicaHosts(cluster.cluster, replicate.devices));
  ASSIGN_OR_RETURN(ops::ReplicatedGraph replicated, ops::Replicate(single_, replicate));
  ASSIGN_OR_RETURN(session_,
                   DistributedSession::Create(*replicated.graph, session_options_, cluster));
  in_use_ = workers;
  return session_.get();
}

bool ElasticReplicas::Answers(size_t index) const {
  Scope root = Scope::NewRootScope();
  ops::Const(root.WithOpName("probe"), 0.0f);
  DistributedOptions one = cluster_;
  std::vector<std::string> alone(index + 1, "");
  alone[index] = all_[index];
  one.cluster.jobs = {{options_.job, alone}};
  one.connect_timeout = options_.probe_timeout;
  return DistributedSession::Create(root.graph(), {}, one).ok();
}

Result<Session*> ElasticReplicas::Reconnect() {
  session_.reset();  // a lost worker fails the old session's requests anyway
  std::vector<std::string> live, lost;
  for (size_t t = 0; t < all_.size(); ++t) (Answers(t) ? live : lost).push_back(all_[t]);
  if (lost.empty()) {
    lost_since_.reset();
    return Build(all_);
  }
  const auto now = std::chrono::steady_clock::now();
  if (!lost_since_) lost_since_ = now;
  const double gone = std::chrono::duration<double>(now - *lost_since_).count();
  if (gone < options_.wait_seconds) {
    return Unavailable(
        "ElasticReplicas: waiting for {} lost worker(s) of job '{}' (first {}) to answer "
        "again: {:.1f} s of {} s",
        lost.size(), options_.job, lost[0], gone, options_.wait_seconds);
  }
  size_t n = live.size();
  while (n > 0 && options_.batch_size > 0 && options_.batch_size % static_cast<int64_t>(n) != 0) {
    --n;
  }
  if (n == 0 || static_cast<int>(n) < options_.min_replicas) {
    return Unavailable(
        "ElasticReplicas: {} of {} workers of job '{}' answer ({} lost, first {}); at least {} "
        "replica(s) needed{}",
        live.size(), all_.size(), options_.job, lost.size(), lost[0], options_.min_replicas,
        options_.batch_size > 0 ? fmt::format(" that divide the batch of {}", options_.batch_size)
                                : "");
  }
  live.resize(n);
  std::fprintf(stderr, "ElasticReplicas: %s gone for %.1f s; going on with %zu of %zu replicas\n",
               lost[0].c_str(), gone, n, all_.size());
  return Build(live);
}

}  // namespace dflow::distributed

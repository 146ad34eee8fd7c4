#include "placer/pipeline_stages.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace dflow {

const char* ScheduleName(PipelineSchedule schedule) {
  return schedule == PipelineSchedule::kGPipe ? "gpipe" : "1f1b";
}

Result<PipelineSchedule> ParseSchedule(std::string_view text) {
  if (text == "gpipe") return PipelineSchedule::kGPipe;
  if (text == "1f1b") return PipelineSchedule::k1F1B;
  return InvalidArgument("unknown pipeline schedule '{}' (gpipe or 1f1b)", text);
}

std::vector<PipelineUnit> StageOrder(PipelineSchedule schedule, int stage, int stages,
                                     int micro_batches) {
  std::vector<PipelineUnit> order;
  if (schedule == PipelineSchedule::kGPipe) {
    for (int m = 0; m < micro_batches; ++m) order.push_back({false, m});
    for (int m = 0; m < micro_batches; ++m) order.push_back({true, m});
    return order;
  }
  const int warmup = std::min(stages - stage - 1, micro_batches);
  for (int m = 0; m < warmup; ++m) order.push_back({false, m});
  int next_backward = 0;
  for (int m = warmup; m < micro_batches; ++m) {
    order.push_back({false, m});
    order.push_back({true, next_backward++});
  }
  for (; next_backward < micro_batches; ++next_backward) order.push_back({true, next_backward});
  return order;
}

int StagePlan::StageOf(int item) const {
  auto it = std::upper_bound(first_item.begin(), first_item.end(), item);
  return static_cast<int>(it - first_item.begin()) - 1;
}

double SimulatePipeline(const StagePlan& plan) {
  const int k = plan.stages(), m = plan.micro_batches;
  constexpr double kNotYet = -1;
  std::vector<std::vector<double>> fdone(k, std::vector<double>(m, kNotYet));
  std::vector<std::vector<double>> bdone(k, std::vector<double>(m, kNotYet));
  std::vector<std::vector<PipelineUnit>> order(k);
  for (int s = 0; s < k; ++s) order[s] = StageOrder(plan.schedule, s, k, m);
  std::vector<size_t> next(k, 0);
  std::vector<double> free_at(k, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < k; ++s) {
      while (next[s] < order[s].size()) {
        const PipelineUnit& u = order[s][next[s]];
        double ready;
        if (!u.backward) {
          if (s > 0 && fdone[s - 1][u.micro_batch] == kNotYet) break;
          ready = s == 0 ? 0 : fdone[s - 1][u.micro_batch] + plan.transfer_s[s - 1];
        } else {
          if (s + 1 < k && bdone[s + 1][u.micro_batch] == kNotYet) break;
          ready = s + 1 == k ? 0 : bdone[s + 1][u.micro_batch] + plan.transfer_s[s];
        }
        const double start = std::max(ready, free_at[s]);
        free_at[s] = start + (u.backward ? plan.backward_s[s] : plan.forward_s[s]);
        (u.backward ? bdone : fdone)[s][u.micro_batch] = free_at[s];
        ++next[s];
        progress = true;
      }
    }
  }
  double step = 0;
  for (int s = 0; s < k; ++s) step = std::max(step, free_at[s] + plan.update_s[s]);
  return step;
}

namespace {

std::string MiB(double bytes) { return fmt::format("{:.2f} MiB", bytes / (1 << 20)); }

// Prefix sums of one per-item figure, so a stage's total is two lookups.
std::vector<double> Prefix(const std::vector<double>& v) {
  std::vector<double> p(v.size() + 1, 0);
  for (size_t i = 0; i < v.size(); ++i) p[i + 1] = p[i] + v[i];
  return p;
}

class Planner {
 public:
  Planner(const StageChain& chain, const PipelineDevices& devices, int m, PipelineSchedule schedule)
      : c_(chain),
        d_(devices),
        k_(static_cast<int>(devices.names.size())),
        m_(m),
        schedule_(schedule),
        persistent_(Prefix(chain.persistent_bytes)),
        activation_(Prefix(chain.activation_bytes)) {
    for (int s = 0; s < k_; ++s) {
      std::vector<double> work(chain.size());
      for (int i = 0; i < chain.size(); ++i) {
        work[i] = chain.forward_s[i][s] + chain.backward_s[i][s];
      }
      work_.push_back(Prefix(work));
    }
  }

  int InFlight(int s) const {
    return schedule_ == PipelineSchedule::kGPipe ? m_ : std::min(k_ - s, m_);
  }
  double Bytes(int s, int begin, int end) const {
    return persistent_[end] - persistent_[begin] +
           InFlight(s) * (activation_[end] - activation_[begin]);
  }
  bool Fits(int s, int begin, int end) const { return Bytes(s, begin, end) <= d_.memory_bytes[s]; }
  // One micro-batch's forward and backward work of items [begin, end) on stage s (transfers
  // are left to the simulated step: they delay a stage's units but take no compute).
  double Work(int s, int begin, int end) const { return work_[s][end] - work_[s][begin]; }

  // The cut whose slowest stage is fastest: dynamic programming over (stages, items covered).
  // `fit`: only cuts whose stages all fit. Empty when there is none.
  std::vector<int> BestCut(bool fit) const {
    const int n = c_.size();
    constexpr double kInf = std::numeric_limits<double>::infinity();
    std::vector<std::vector<double>> best(k_ + 1, std::vector<double>(n + 1, kInf));
    std::vector<std::vector<int>> from(k_ + 1, std::vector<int>(n + 1, -1));
    best[0][0] = 0;
    for (int s = 1; s <= k_; ++s) {
      for (int j = s; j <= n - (k_ - s); ++j) {
        // Stage s - 1 holds items [i, j); its bytes grow as i falls, so stop at the first
        // start that does not fit.
        for (int i = j - 1; i >= s - 1; --i) {
          if (fit && !Fits(s - 1, i, j)) break;
          if (best[s - 1][i] == kInf) continue;
          const double slowest = std::max(best[s - 1][i], Work(s - 1, i, j));
          if (slowest < best[s][j]) {
            best[s][j] = slowest;
            from[s][j] = i;
          }
        }
      }
    }
    if (best[k_][n] == kInf) return {};
    std::vector<int> first(k_ + 1, n);
    for (int s = k_, j = n; s > 0; --s) {
      first[s - 1] = from[s][j];
      j = from[s][j];
    }
    return first;
  }

  StagePlan Make(const std::vector<int>& first) const {
    StagePlan p;
    p.micro_batches = m_;
    p.schedule = schedule_;
    p.first_item = first;
    for (int s = 0; s < k_; ++s) {
      double f = 0, b = 0, u = 0;
      for (int i = first[s]; i < first[s + 1]; ++i) {
        f += c_.forward_s[i][s];
        b += c_.backward_s[i][s];
        u += c_.update_s[i][s];
      }
      p.forward_s.push_back(f);
      p.backward_s.push_back(b);
      p.update_s.push_back(u);
      p.in_flight.push_back(InFlight(s));
      p.persistent_bytes.push_back(persistent_[first[s + 1]] - persistent_[first[s]]);
      p.activation_bytes.push_back(activation_[first[s + 1]] - activation_[first[s]]);
      p.peak_bytes.push_back(Bytes(s, first[s], first[s + 1]));
      if (s + 1 < k_) {
        p.transfer_s.push_back(d_.links[s].Seconds(c_.crossing_bytes[first[s + 1] - 1]));
      }
    }
    p.predicted_step_s = SimulatePipeline(p);
    double slowest = 0, updates = 0;
    for (int s = 0; s < k_; ++s) {
      slowest = std::max(slowest, p.forward_s[s] + p.backward_s[s]);
      updates = std::max(updates, p.update_s[s]);
    }
    p.ideal_step_s = m_ * slowest + updates;
    return p;
  }

  // ResourceExhausted for the first stage of `plan` over its device's limit.
  Status Overflow(const StagePlan& plan, const std::string& what) const {
    for (int s = 0; s < k_; ++s) {
      if (plan.peak_bytes[s] <= d_.memory_bytes[s]) continue;
      return ResourceExhausted(
          "pipeline: {}: stage {} on {} (nodes '{}' to '{}') needs {}: variables, optimizer "
          "state and gradients {}, activations {} x {} micro-batches in flight ({}); its limit "
          "is {}",
          what, s, d_.names[s], c_.names[plan.first_item[s]], c_.names[plan.first_item[s + 1] - 1],
          MiB(plan.peak_bytes[s]), MiB(plan.persistent_bytes[s]), MiB(plan.activation_bytes[s]),
          plan.in_flight[s], ScheduleName(schedule_), MiB(d_.memory_bytes[s]));
    }
    return Status::OK();
  }

 private:
  const StageChain& c_;
  const PipelineDevices& d_;
  const int k_, m_;
  const PipelineSchedule schedule_;
  std::vector<double> persistent_, activation_;
  std::vector<std::vector<double>> work_;  // [stage device] prefix sums of per-item work
};

}  // namespace

Result<StagePlan> PlanStages(const StageChain& chain, const PipelineDevices& devices,
                             int micro_batches, PipelineSchedule schedule,
                             const std::vector<int>& cuts) {
  const int k = static_cast<int>(devices.names.size()), n = chain.size();
  if (k < 1) return InvalidArgument("pipeline: no stage devices given");
  if (devices.memory_bytes.size() != devices.names.size() ||
      static_cast<int>(devices.links.size()) != k - 1) {
    return InvalidArgument("pipeline: {} devices but {} memory limits and {} links", k,
                           devices.memory_bytes.size(), devices.links.size());
  }
  if (micro_batches < 1) {
    return InvalidArgument("pipeline: micro-batches must be at least 1 ({} given)", micro_batches);
  }
  if (n < k) {
    return InvalidArgument("pipeline: {} stages need at least {} forward nodes; the graph has {}",
                           k, k, n);
  }
  for (int i = 0; i < n; ++i) {
    if (static_cast<int>(chain.forward_s[i].size()) != k ||
        static_cast<int>(chain.backward_s[i].size()) != k ||
        static_cast<int>(chain.update_s[i].size()) != k) {
      return InvalidArgument("pipeline: item {} has times for other than {} devices", i, k);
    }
  }
  Planner planner(chain, devices, micro_batches, schedule);
  if (!cuts.empty()) {
    if (static_cast<int>(cuts.size()) != k - 1) {
      return InvalidArgument("pipeline: {} stages need {} split points; {} given", k, k - 1,
                             cuts.size());
    }
    std::vector<int> first = {0};
    for (int c : cuts) {
      if (c <= first.back() || c >= n) {
        return InvalidArgument(
            "pipeline: split point '{}' does not come after the previous stage's start in the "
            "forward pass's order",
            c >= 0 && c < n ? chain.names[c] : std::to_string(c));
      }
      first.push_back(c);
    }
    first.push_back(n);
    StagePlan plan = planner.Make(first);
    RETURN_IF_ERROR(planner.Overflow(plan, "the split points given do not fit"));
    return plan;
  }
  std::vector<int> first = planner.BestCut(/*fit=*/true);
  if (first.empty()) {
    // Name what the fastest cut would need.
    StagePlan fastest = planner.Make(planner.BestCut(/*fit=*/false));
    RETURN_IF_ERROR(planner.Overflow(
        fastest, fmt::format("no cut into {} stages fits their devices; the fastest", k)));
    return Internal("pipeline: no cut fits, yet the fastest one does");
  }
  return planner.Make(first);
}

}  // namespace dflow

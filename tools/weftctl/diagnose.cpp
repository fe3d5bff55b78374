// weftctl diagnose: explains, from the status pages of a job's ranks on this node, why it is
// stuck, in one paragraph. Every rank takes the same ticket for the same op (ops are issued in
// the same order everywhere), so the oldest ticket any rank still waits on is the op to explain,
// and each rank's row for that ticket (or its absence) says what that rank did with it.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "inspect.hpp"
#include "runtime/work_queue.hpp"

namespace weftctl {

namespace st = weft::status;

namespace {

struct Verdict {
  std::string cause;       // dead_process, mismatch, never_submitted, failed, in_progress, not_stuck
  std::vector<int> ranks;  // the ranks the cause names
  std::vector<int> waiting;
  int64_t op = -1;
  std::string text;
};

std::string rankList(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i)
    s += (i == 0 ? "" : i + 1 == ranks.size() ? " and " : ", ") + std::to_string(ranks[i]);
  return s;
}

// What must agree between ranks for one op: its kind and dtype, and the count where every rank
// passes the same one (the GEMM and embedding ops may legitimately differ in their sizes).
std::string signature(const st::OpRow& r) {
  const auto kind = static_cast<weft::dev::OpKind>(r.kind);
  const bool counted = kind == weft::dev::OpKind::kAllReduce || kind == weft::dev::OpKind::kAllReduceOneShot ||
                       kind == weft::dev::OpKind::kAllToAll || kind == weft::dev::OpKind::kGemv ||
                       kind == weft::dev::OpKind::kGemvAllReduce;
  std::string what = st::kindName(r.kind);
  if (kind == weft::dev::OpKind::kAllReduce || kind == weft::dev::OpKind::kAllReduceOneShot)
    what = "allreduce";  // one-shot or not follows from the count, which is compared too
  return what + " of " + (counted ? std::to_string(r.count) + " " : "") + st::dtypeName(r.dtype) +
         (kind == weft::dev::OpKind::kAllToAll ? " per rank" : "");
}

const st::OpRow* rowFor(const st::Snapshot& s, uint64_t ticket, bool* inFlight, size_t* index) {
  for (size_t i = 0; i < s.inFlight.size(); ++i)
    if (s.inFlight[i].ticket == ticket) {
      *inFlight = true;
      *index = i;
      return &s.inFlight[i];
    }
  for (const st::OpRow& r : s.history)
    if (r.ticket == ticket) {
      *inFlight = false;
      return &r;
    }
  return nullptr;
}

// What rank `s` is doing now, for the paragraph.
std::string nowDoing(const st::Snapshot& s) {
  std::string last = "it has completed no op";
  if (!s.history.empty()) {
    const st::OpRow& r = s.history.back();
    last = "its last completed op is #" + std::to_string(r.ticket) + " (" + signature(r) + ", " +
           secondsText(r.endNs - r.submitNs) + ", " + st::statusName(r.status) + ", ended " +
           secondsText(s.readNs - r.endNs) + " ago)";
  }
  if (!s.inFlight.empty())
    return last + " and it is in op #" + std::to_string(s.inFlight.front().ticket) + " (" +
           signature(s.inFlight.front()) + ") now";
  return last + " and it is in no weft op now (idle " +
         secondsText(s.readNs - std::max(s.header.updatedNs, s.header.createdNs)) + ")";
}

Verdict judge(const std::vector<const st::Snapshot*>& pages, bool gathered) {
  const char* const kNoPage =
      gathered ? "destroyed, on a node not asked, or status_pages=0" : "destroyed, on another node, or status_pages=0";
  Verdict v;
  const int nranks = pages.front()->header.nranks;
  std::vector<int> present, dead;
  for (const st::Snapshot* s : pages) {
    present.push_back(s->header.rank);
    if (!s->alive) dead.push_back(s->header.rank);
  }
  std::vector<int> absent;
  for (int r = 0; r < nranks; ++r)
    if (std::find(present.begin(), present.end(), r) == present.end()) absent.push_back(r);
  std::vector<std::string> hosts;
  for (const st::Snapshot* s : pages)
    if (std::find(hosts.begin(), hosts.end(), s->host()) == hosts.end()) hosts.push_back(s->host());
  std::string where = "on this node";
  if (gathered) {
    where = "from " + std::to_string(hosts.size()) + (hosts.size() == 1 ? " node (" : " nodes (");
    for (size_t i = 0; i < hosts.size(); ++i) where += (i ? ", " : "") + hosts[i];
    where += ")";
  }
  std::string head = "Communicator " + commHex(pages.front()->header.commId) + " (" + std::to_string(nranks) +
                     " ranks; pages of " + rankList(present) + " " + where + ")";
  // The op to explain: the oldest any rank still waits on, else the oldest that failed.
  int64_t op = -1;
  for (const st::Snapshot* s : pages) {
    if (!s->inFlight.empty() && (op < 0 || s->inFlight.front().ticket < static_cast<uint64_t>(op)))
      op = static_cast<int64_t>(s->inFlight.front().ticket);
  }
  if (op < 0)
    for (const st::Snapshot* s : pages)
      if (s->header.failureValid && (op < 0 || s->header.failure.ticket < static_cast<uint64_t>(op)))
        op = static_cast<int64_t>(s->header.failure.ticket);
  if (op < 0 && dead.empty()) {
    v.cause = "not_stuck";
    v.text = head + ": no rank is in an op and none has failed; nothing is stuck here." +
             (absent.empty() ? "" : " No page here for " + rankList(absent) + " (" + kNoPage + ").");
    return v;
  }
  v.op = op;
  std::string text = head + ":";
  std::vector<int> never;
  std::map<std::string, std::vector<int>> bySignature;
  std::string waitText, failText;
  for (const st::Snapshot* s : pages) {
    const int rank = s->header.rank;
    bool inFlight = false;
    size_t i = 0;
    const st::OpRow* r = op < 0 ? nullptr : rowFor(*s, static_cast<uint64_t>(op), &inFlight, &i);
    if (r) bySignature[signature(*r)].push_back(rank);
    if (r && inFlight && s->alive) {
      v.waiting.push_back(rank);
      if (waitText.empty())
        waitText = "rank " + std::to_string(rank) + " at " + std::to_string(s->progress[i].itemsDone) + " of " +
                   std::to_string(r->nitems) + " items, " + s->rowState(i) + ", submitted " +
                   secondsText(s->readNs - r->submitNs) + " ago";
    }
    if (op >= 0 && s->header.submitted <= static_cast<uint64_t>(op)) never.push_back(rank);
    if (s->header.failureValid && failText.empty())
      failText = " Rank " + std::to_string(rank) + " recorded: " + weft::failureText(s->header.failure) + ".";
  }
  const std::string opName = "op #" + std::to_string(op);
  if (!v.waiting.empty()) {
    const bool same = bySignature.size() == 1;
    text += " " + rankList(v.waiting) + (v.waiting.size() == 1 ? " waits" : " wait") + " in " + opName + " (" +
            (same ? bySignature.begin()->first + "; " : "") + waitText + ").";
  }
  text += failText;
  if (!dead.empty()) {
    v.cause = "dead_process";
    v.ranks = dead;
    for (int r : dead)
      for (const st::Snapshot* s : pages)
        if (s->header.rank == r)
          text += " Rank " + std::to_string(r) + "'s process (pid " + std::to_string(s->header.pid) + ") is " +
                  s->liveness + "; " + nowDoing(*s) + " as its page last said.";
    text += " Likely cause: a dead process: " + rankList(dead) +
            (dead.size() == 1 ? " crashed or was killed" : " crashed or were killed") +
            (v.waiting.empty() ? "" : ", and the others wait for signals it will never send (until timeout_s)") + ".";
  } else if (bySignature.size() > 1) {
    v.cause = "mismatch";
    text += " The ranks submitted different ops as " + opName + ":";
    bool first = true;
    for (const auto& [sig, ranks] : bySignature) {
      text += std::string(first ? " " : "; ") + rankList(ranks) + " " + sig;
      first = false;
    }
    // The smaller group is the likelier odd one out.
    size_t fewest = SIZE_MAX;
    for (const auto& [sig, ranks] : bySignature)
      if (ranks.size() < fewest) {
        fewest = ranks.size();
        v.ranks = ranks;
      }
    text +=
        ". Likely cause: a mismatch: the ranks' programs diverged (every rank must call the same ops in the same "
        "order with the same counts), so each waits for signals the others never send.";
  } else if (!never.empty()) {
    v.cause = "never_submitted";
    v.ranks = never;
    for (int r : never)
      for (const st::Snapshot* s : pages)
        if (s->header.rank == r)
          text += " Rank " + std::to_string(r) + " never submitted " + opName + ": " + nowDoing(*s) + ".";
    text += " Likely cause: " + rankList(never) + " never called " + opName +
            " (it runs other code, or waits on something outside weft); " +
            (v.waiting.empty() ? std::string("the others wait")
                               : rankList(v.waiting) + (v.waiting.size() == 1 ? " waits" : " wait")) +
            " on it.";
  } else if (!failText.empty()) {
    v.cause = "failed";
    text += " Likely cause: the recorded wait above: the rank it names did not send what was expected in time.";
  } else {
    v.cause = "in_progress";
    text += " Every local rank is in " + opName + " with the same arguments: it is still running, or waits on " +
            (absent.empty() ? std::string("the transport") : rankList(absent) + ", which have no page here") +
            "; run diagnose again to see whether its items advance.";
  }
  if (!absent.empty() && v.cause != "in_progress")
    text += " No page here for " + rankList(absent) + " (" + kNoPage + ").";
  v.text = text;
  return v;
}

std::string intList(const std::vector<int>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

}  // namespace

int runDiagnose(const DiagnoseOptions& o) {
  std::vector<st::Listing> listings{st::readDirectory(o.dir)};
  const bool gathered = o.gather.any();
  std::vector<std::string> unreachable;
  if (gathered)
    for (st::Listing& l : gatherRemote(o.gather, &unreachable)) listings.push_back(std::move(l));
  std::string notGathered;
  for (size_t i = 0; i < unreachable.size(); ++i) notGathered += (i ? ", " : "") + unreachable[i];
  std::map<uint64_t, std::vector<const st::Snapshot*>> jobs;
  for (const st::Listing& l : listings) {
    for (const st::Refusal& r : l.refused)
      std::fprintf(stderr, "weftctl: refused %s%s%s: %s\n", l.dir.c_str(), r.name == l.dir ? "" : "/",
                   r.name == l.dir ? "" : r.name.c_str(), r.why.c_str());
    for (const st::Snapshot& s : l.pages) {
      if (!commMatches(s.header.commId, o.comm)) continue;
      // A node listed twice, or this node reached again: each rank's page once.
      auto& job = jobs[s.header.commId];
      const bool seen = std::any_of(job.begin(), job.end(), [&](const st::Snapshot* p) {
        return p->header.rank == s.header.rank && p->header.pid == s.header.pid && p->host() == s.host();
      });
      if (!seen) job.push_back(&s);
    }
  }
  for (auto& [id, pages] : jobs)
    std::stable_sort(pages.begin(), pages.end(),
                     [](const st::Snapshot* a, const st::Snapshot* b) { return a->header.rank < b->header.rank; });
  if (o.json) std::printf("{\"dir\":%s,\"communicators\":[", jsonString(o.dir).c_str());
  bool first = true;
  for (const auto& [id, pages] : jobs) {
    Verdict v = judge(pages, gathered);
    if (!notGathered.empty()) v.text += " Not gathered: " + notGathered + ".";
    if (o.json)
      std::printf("%s\n{\"comm\":%s,\"op\":%" PRId64 ",\"cause\":%s,\"ranks\":%s,\"waiting\":%s,\"explanation\":%s}",
                  first ? "" : ",", jsonString(commHex(id)).c_str(), v.op, jsonString(v.cause).c_str(),
                  intList(v.ranks).c_str(), intList(v.waiting).c_str(), jsonString(v.text).c_str());
    else
      std::printf("%s%s\n", first ? "" : "\n", v.text.c_str());
    first = false;
  }
  if (o.json) {
    std::printf("\n],\"unreachable\":[");
    for (size_t i = 0; i < unreachable.size(); ++i)
      std::printf("%s%s", i ? "," : "", jsonString(unreachable[i]).c_str());
    std::printf("]}\n");
  }
  if (jobs.empty()) {
    std::fprintf(stderr, "weftctl: no status page%s in %s%s\n", o.comm.empty() ? "" : (" of comm " + o.comm).c_str(),
                 o.dir.c_str(), gathered ? " or on the nodes asked" : "");
    return 1;
  }
  // Explained, but from fewer nodes than asked.
  return unreachable.empty() ? 0 : 2;
}

}  // namespace weftctl

// weftctl queue / clean: every communicator's status page on this node, as text or JSON.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <string>
#include <thread>

#include "inspect.hpp"
#include "runtime/work_queue.hpp"

namespace weftctl {

namespace st = weft::status;

namespace {

// The path a row's flags name (the GEMM's blas, the embedding's unfused), or null for the op's own.
const char* flaggedPath(const st::OpRow& r) {
  return r.flags & st::kRowVendorProduct ? "blas" : r.flags & st::kRowPooledFirst ? "unfused" : nullptr;
}

volatile sig_atomic_t gInterrupted = 0;

std::string num(uint64_t v) { return std::to_string(v); }

std::string decimal(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3f", v);
  return b;
}

std::string failureLine(const st::Snapshot& s) {
  if (!s.header.failureValid) return "";
  return weft::failureText(s.header.failure) + " (" + secondsText(s.readNs - s.header.failureNs) + " ago)";
}

void printText(const st::Listing& l, const QueueOptions& o) {
  size_t shown = 0;
  uint64_t comm = 0;
  for (const st::Snapshot& s : l.pages) {
    const st::PageHeader& h = s.header;
    if (!commMatches(h.commId, o.comm) || (o.pid && h.pid != o.pid)) continue;
    if (shown == 0 || h.commId != comm) {
      size_t here = 0;
      for (const st::Snapshot& t : l.pages) here += t.header.commId == h.commId;
      std::printf("%scomm %s: %d ranks, %zu page(s) here\n", shown ? "\n" : "", commHex(h.commId).c_str(), h.nranks,
                  here);
      comm = h.commId;
    }
    ++shown;
    // A page's state is what its process last wrote: "running" on a dead one means it died so.
    const std::string state =
        !s.alive && h.state == 0 ? std::string("died running") : std::string(st::pageStateName(h.state));
    std::printf("  rank %d  pid %d (%s)  host %s  device %s  engine %s  state %s\n", h.rank, h.pid, s.liveness.c_str(),
                h.host, h.device, h.engine, state.c_str());
    std::string paths;
    for (size_t r = 0; r < s.paths.size() && r < 16; ++r)
      paths += (r ? " " : "") + std::to_string(r) + ":" + weft::transport::pathName(s.paths[r]);
    if (s.paths.size() > 16) paths += " ...";
    std::printf("    paths %s\n", paths.c_str());
    if (h.proxied) {
      const st::ProxyCounts& x = h.proxy;
      std::printf("    host proxy sent %" PRIu64 " messages in %" PRIu64 " (%" PRIu64 " batches), %" PRIu64
                  " RMA writes\n",
                  x.parts, x.messages, x.batches, x.writes);
    }
    const st::Counters& c = h.counters;
    std::string byKind;
    for (uint32_t k = 0; k < st::kKinds; ++k)
      if (c.ops[k])
        byKind += std::string(byKind.empty() ? "" : ", ") + st::kindName(k) + " " + num(c.ops[k]) + " (" +
                  num(c.bytes[k]) + " B)";
    std::printf("    ops submitted %" PRIu64 ", ended %" PRIu64 "%s; timeouts %" PRIu64 ", aborts %" PRIu64
                ", errors %" PRIu64 "\n",
                h.submitted, h.ended, byKind.empty() ? "" : (": " + byKind).c_str(), c.timeouts, c.aborts, c.errors);
    if (s.inFlight.empty()) std::printf("    in flight: none\n");
    for (size_t i = 0; i < s.inFlight.size(); ++i) {
      const st::OpRow& r = s.inFlight[i];
      const weft::SlotProgress& p = s.progress[i];
      std::string state = s.rowState(i);
      if (p.startNs) state += " " + secondsText(s.readNs - p.startNs);
      std::printf("    in flight: op #%" PRIu64 " %s: %s, items %" PRIu64 "/%u, submitted %s ago\n", r.ticket,
                  opText(r).c_str(), state.c_str(), p.itemsDone, r.nitems, secondsText(s.readNs - r.submitNs).c_str());
    }
    std::string last;
    for (size_t i = s.history.size(), n = 0; i-- > 0 && n < 4; ++n) {
      const st::OpRow& r = s.history[i];
      last += std::string(n ? "; " : "") + "#" + num(r.ticket) + " " + st::kindName(r.kind) +
              (flaggedPath(r) ? std::string(" (") + flaggedPath(r) + ")" : "") + " " +
              secondsText(r.endNs - r.submitNs) + " " + st::statusName(r.status);
    }
    if (!last.empty()) std::printf("    last ops: %s\n", last.c_str());
    if (const std::string f = failureLine(s); !f.empty()) std::printf("    first failure: %s\n", f.c_str());
  }
  if (shown == 0)
    std::printf("no status pages%s in %s%s\n", o.comm.empty() && !o.pid ? "" : " match", l.dir.c_str(),
                l.missing ? " (it does not exist yet)" : "");
  for (const st::Refusal& r : l.refused)
    std::fprintf(stderr, "weftctl: refused %s/%s: %s\n", l.dir.c_str(), r.name.c_str(), r.why.c_str());
}

std::string rowJson(const st::OpRow& r) {
  return "{\"ticket\":" + num(r.ticket) + ",\"op\":" + jsonString(st::kindName(r.kind)) +
         ",\"dtype\":" + jsonString(st::dtypeName(r.dtype)) + ",\"count\":" + num(r.count) +
         ",\"bytes\":" + num(r.bytes) + ",\"items\":" + num(r.nitems) +
         (r.kind == static_cast<uint32_t>(weft::dev::OpKind::kGemmAllToAll) ||
                  r.kind == static_cast<uint32_t>(weft::dev::OpKind::kEmbeddingAllToAll)
              ? ",\"path\":" + jsonString(flaggedPath(r) ? flaggedPath(r) : "fused")
              : "");
}

std::string pageJson(const st::Snapshot& s) {
  const st::PageHeader& h = s.header;
  std::string j = "{\"page\":" + jsonString(s.name) + ",\"comm\":" + jsonString(commHex(h.commId)) +
                  ",\"rank\":" + std::to_string(h.rank) + ",\"nranks\":" + std::to_string(h.nranks) +
                  ",\"pid\":" + std::to_string(h.pid) + ",\"alive\":" + (s.alive ? "true" : "false") +
                  ",\"liveness\":" + jsonString(s.liveness) + ",\"host\":" + jsonString(h.host) +
                  ",\"device\":" + jsonString(h.device) + ",\"engine\":" + jsonString(h.engine) +
                  ",\"comm_state\":" + jsonString(st::pageStateName(h.state)) + ",\"paths\":[";
  for (size_t r = 0; r < s.paths.size(); ++r) j += (r ? "," : "") + jsonString(weft::transport::pathName(s.paths[r]));
  j += "],\"submitted\":" + num(h.submitted) + ",\"ended\":" + num(h.ended) + ",\"slots\":[";
  for (size_t i = 0; i < s.inFlight.size(); ++i) {
    const st::OpRow& r = s.inFlight[i];
    const weft::SlotProgress& p = s.progress[i];
    j += (i ? "," : "") + rowJson(r) + ",\"state\":" + jsonString(s.rowState(i)) +
         ",\"items_done\":" + num(p.itemsDone) + ",\"waited_s\":" + decimal((s.readNs - r.submitNs) / 1e9) +
         ",\"running_s\":" + decimal(p.startNs ? (s.readNs - p.startNs) / 1e9 : 0.0) + "}";
  }
  j += "],\"history\":[";
  for (size_t i = 0; i < s.history.size(); ++i) {
    const st::OpRow& r = s.history[i];
    j += (i ? "," : "") + rowJson(r) + ",\"status\":" + jsonString(st::statusName(r.status)) +
         ",\"latency_us\":" + decimal((r.endNs - r.submitNs) / 1e3) + "}";
  }
  const st::Counters& c = h.counters;
  j += "],\"counters\":{\"ops\":{";
  bool first = true;
  for (uint32_t k = 1; k < st::kKinds; ++k, first = false)
    j += (first ? "" : ",") + jsonString(st::kindName(k)) + ":" + num(c.ops[k]);
  j += "},\"bytes\":{";
  first = true;
  for (uint32_t k = 1; k < st::kKinds; ++k, first = false)
    j += (first ? "" : ",") + jsonString(st::kindName(k)) + ":" + num(c.bytes[k]);
  j += "},\"timeouts\":" + num(c.timeouts) + ",\"aborts\":" + num(c.aborts) + ",\"errors\":" + num(c.errors) + "}";
  const st::ProxyCounts& x = h.proxy;
  j += ",\"proxy\":" + (h.proxied ? "{\"messages\":" + num(x.parts) + ",\"wire_messages\":" + num(x.messages) +
                                        ",\"batches\":" + num(x.batches) + ",\"writes\":" + num(x.writes) + "}"
                                  : std::string("null"));
  j += ",\"failure\":";
  j += h.failureValid ? jsonString(failureLine(s)) : "null";
  return j + "}";
}

// One page a line, so that scripts (and the tests) can take it apart line by line too.
void printJson(const st::Listing& l, const QueueOptions& o) {
  std::printf("{\"dir\":%s,\"pages\":[", jsonString(l.dir).c_str());
  bool first = true;
  for (const st::Snapshot& s : l.pages) {
    if (!commMatches(s.header.commId, o.comm) || (o.pid && s.header.pid != o.pid)) continue;
    std::printf("%s\n%s", first ? "" : ",", pageJson(s).c_str());
    first = false;
  }
  std::printf("\n],\"refused\":[");
  for (size_t i = 0; i < l.refused.size(); ++i)
    std::printf("%s\n{\"name\":%s,\"why\":%s}", i ? "," : "", jsonString(l.refused[i].name).c_str(),
                jsonString(l.refused[i].why).c_str());
  std::printf("\n]}\n");
}

}  // namespace

std::string commHex(uint64_t id) {
  char b[20];
  std::snprintf(b, sizeof b, "%016" PRIx64, id);
  return b;
}

bool commMatches(uint64_t id, const std::string& wanted) {
  return wanted.empty() || commHex(id).compare(0, wanted.size(), wanted) == 0;
}

std::string jsonString(const std::string& s) {
  std::string out = "\"";
  for (const unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      out += b;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string secondsText(uint64_t ns) {
  char b[32];
  if (ns >= 1000000000ull)
    std::snprintf(b, sizeof b, "%.1f s", ns / 1e9);
  else if (ns >= 1000000ull)
    std::snprintf(b, sizeof b, "%.1f ms", ns / 1e6);
  else
    std::snprintf(b, sizeof b, "%.0f us", ns / 1e3);
  return b;
}

std::string opText(const st::OpRow& r) {
  const auto kind = static_cast<weft::dev::OpKind>(r.kind);
  std::string what = st::kindName(r.kind);
  if (kind == weft::dev::OpKind::kAllReduce || kind == weft::dev::OpKind::kAllReduceOneShot)
    what += " of " + num(r.count) + " " + st::dtypeName(r.dtype);
  else if (kind == weft::dev::OpKind::kAllToAll)
    what += " of " + num(r.count) + " " + st::dtypeName(r.dtype) + " per rank";
  else
    what +=
        std::string(" (") + st::dtypeName(r.dtype) + (flaggedPath(r) ? std::string(", ") + flaggedPath(r) : "") + ")";
  return what + ", " + num(r.bytes) + " B";
}

int runQueue(const QueueOptions& o) {
  signal(SIGINT, [](int) { gInterrupted = 1; });
  const bool clear = o.watch > 0 && !o.json && isatty(STDOUT_FILENO);
  for (uint64_t n = 1;; ++n) {
    const st::Listing l = st::readDirectory(o.dir);
    if (clear) std::printf("\033[H\033[2J");
    if (o.json)
      printJson(l, o);
    else
      printText(l, o);
    std::fflush(stdout);
    if (o.watch <= 0 || (o.iterations && n >= o.iterations)) break;
    // Sleeps in short steps, so that Ctrl-C ends the watch at once.
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(o.watch);
    while (!gInterrupted && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (gInterrupted) break;
  }
  return 0;
}

int runClean(const std::string& dir) {
  const std::vector<std::string> removed = st::removeDead(dir);
  for (const std::string& n : removed) std::printf("removed %s/%s\n", dir.c_str(), n.c_str());
  std::printf("%zu dead page(s) removed from %s\n", removed.size(), dir.c_str());
  return 0;
}

}  // namespace weftctl

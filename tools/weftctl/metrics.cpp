// weftctl metrics: every communicator's counters on this node in the Prometheus text exposition
// format (version 0.0.4), for a node exporter's textfile collector or a scrape wrapper. Read from
// the status pages, like `weftctl queue`; a page that cannot be read counts in
// weft_status_pages_refused, so that a scrape shows it rather than hiding it.
#include <cstdio>
#include <string>
#include <vector>

#include "inspect.hpp"

namespace weftctl {

namespace st = weft::status;

namespace {

// A label value as the format wants it: backslash, double quote and line feed escaped.
std::string labelValue(const std::string& v) {
  std::string out;
  for (char ch : v) {
    if (ch == '\\')
      out += "\\\\";
    else if (ch == '"')
      out += "\\\"";
    else if (ch == '\n')
      out += "\\n";
    else
      out += ch;
  }
  return out;
}

// One metric family: its HELP and TYPE once, then its samples.
struct Family {
  const char* name;
  const char* type;  // counter or gauge
  const char* help;
  std::vector<std::string> samples;
};

std::string pageLabels(const st::Snapshot& s) {
  return "comm=\"" + commHex(s.header.commId) + "\",rank=\"" + std::to_string(s.header.rank) + "\"";
}

void sample(Family& f, const std::string& labels, double value) {
  char v[40];
  std::snprintf(v, sizeof v, "%.17g", value);
  f.samples.push_back(std::string(f.name) + "{" + labels + "} " + v);
}

}  // namespace

int runMetrics(const MetricsOptions& o) {
  const st::Listing l = st::readDirectory(o.dir);
  Family info{"weft_communicator_info",
              "gauge",
              "A communicator's rank on this node (always 1); its labels say what it is and where",
              {}};
  Family alive{"weft_process_alive", "gauge", "1 while the rank's process runs, 0 once it is gone", {}};
  Family failed{"weft_communicator_failed", "gauge", "1 once the communicator has failed (sticky)", {}};
  Family submitted{"weft_ops_submitted_total", "counter", "Ops submitted on the communicator", {}};
  Family ended{"weft_ops_ended_total", "counter", "Ops the host saw end", {}};
  Family ops{"weft_ops_total", "counter", "Ops ended, by kind", {}};
  Family bytes{"weft_op_bytes_total", "counter", "Bytes the ended ops wrote on this rank, by kind", {}};
  Family timeouts{"weft_timeouts_total", "counter", "Ops that failed with a timeout", {}};
  Family aborts{"weft_aborts_total", "counter", "Ops that ended aborted", {}};
  Family errors{"weft_errors_total", "counter", "Ops that failed otherwise (bad input, transport)", {}};
  Family inFlight{"weft_ops_in_flight", "gauge", "Ops submitted and not yet seen to end", {}};
  Family oldest{"weft_oldest_op_age_seconds",
                "gauge",
                "How long the oldest op in flight has been submitted (0: none in flight)",
                {}};
  // The host proxy's traffic: only pages of ranks with proxy peers have these samples.
  Family proxyParts{"weft_proxy_messages_total",
                    "counter",
                    "Messages the host proxy cut from the kernels' triggers (data, signals, flagged data)",
                    {}};
  Family proxyWire{"weft_proxy_wire_messages_total",
                   "counter",
                   "Wire messages the host proxy sent them in (a batch of several is one)",
                   {}};
  Family proxyBatches{"weft_proxy_batches_total", "counter", "Wire messages that were batches of several", {}};
  Family proxyWrites{"weft_proxy_writes_total", "counter", "RMA writes the host proxy issued", {}};
  Family refused{"weft_status_pages_refused",
                 "gauge",
                 "Status pages in the directory that could not be read (foreign, corrupt, of another version)",
                 {}};
  for (const st::Snapshot& s : l.pages) {
    const st::PageHeader& h = s.header;
    if (!commMatches(h.commId, o.comm) || (o.pid && h.pid != o.pid)) continue;
    const std::string page = pageLabels(s);
    sample(info,
           page + ",nranks=\"" + std::to_string(h.nranks) + "\",pid=\"" + std::to_string(h.pid) + "\",host=\"" +
               labelValue(h.host) + "\",device=\"" + labelValue(h.device) + "\",engine=\"" + labelValue(h.engine) +
               "\",state=\"" + st::pageStateName(h.state) + "\"",
           1);
    sample(alive, page, s.alive ? 1 : 0);
    sample(failed, page, h.failureValid ? 1 : 0);
    sample(submitted, page, static_cast<double>(h.submitted));
    sample(ended, page, static_cast<double>(h.ended));
    for (uint32_t k = 0; k < st::kKinds; ++k) {
      const std::string kind = page + ",kind=\"" + st::kindName(k) + "\"";
      sample(ops, kind, static_cast<double>(h.counters.ops[k]));
      sample(bytes, kind, static_cast<double>(h.counters.bytes[k]));
    }
    sample(timeouts, page, static_cast<double>(h.counters.timeouts));
    sample(aborts, page, static_cast<double>(h.counters.aborts));
    sample(errors, page, static_cast<double>(h.counters.errors));
    sample(inFlight, page, static_cast<double>(s.inFlight.size()));
    uint64_t age = 0;
    for (const st::OpRow& r : s.inFlight)
      if (r.submitNs && s.readNs > r.submitNs && s.readNs - r.submitNs > age) age = s.readNs - r.submitNs;
    sample(oldest, page, age / 1e9);
    if (h.proxied) {
      sample(proxyParts, page, static_cast<double>(h.proxy.parts));
      sample(proxyWire, page, static_cast<double>(h.proxy.messages));
      sample(proxyBatches, page, static_cast<double>(h.proxy.batches));
      sample(proxyWrites, page, static_cast<double>(h.proxy.writes));
    }
  }
  refused.samples.push_back(std::string(refused.name) + " " + std::to_string(l.refused.size()));
  for (const Family* f : {&info, &alive, &failed, &submitted, &ended, &ops, &bytes, &timeouts, &aborts, &errors,
                          &inFlight, &oldest, &proxyParts, &proxyWire, &proxyBatches, &proxyWrites, &refused}) {
    if (f->samples.empty()) continue;
    std::printf("# HELP %s %s\n# TYPE %s %s\n", f->name, f->help, f->name, f->type);
    for (const std::string& line : f->samples) std::printf("%s\n", line.c_str());
  }
  return 0;
}

}  // namespace weftctl

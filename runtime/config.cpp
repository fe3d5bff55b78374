#include "config.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "common/error.hpp"
#include "common/log.hpp"
#include "weft/version.h"

namespace weft {

const char* sourceName(Source s) {
  switch (s) {
    case Source::kApi:
      return "api";
    case Source::kEnv:
      return "env";
    case Source::kFile:
      return "file";
    default:
      return "default";
  }
}

namespace {
const bool kCpuBackend = std::string(WEFT_BUILD_GPU) == "cpu";
}  // namespace

const std::vector<SettingSpec>& settingSpecs() {
  static const std::vector<SettingSpec> kSpecs = {
      {"timeout_s", SettingType::kDouble, "30", "Bound of every wait on a peer or the engine, in seconds", 0.001,
       86400},
      {"bootstrap_timeout_s", SettingType::kDouble, "120", "Bound of every bootstrap connect and exchange, in seconds",
       0.1, 86400},
      {"bootstrap_addr", SettingType::kString, "", "Address weft_get_unique_id advertises (default: first interface)"},
      {"bootstrap_ifname", SettingType::kString, "", "Interface whose address weft_get_unique_id advertises"},
      {"engine", SettingType::kString, "launched",
       "GPU: launched (a kernel per op on the caller's stream) or persistent (a resident kernel)"},
      {"persistent_ctas", SettingType::kInt, kCpuBackend ? "2" : "128",
       "Engine workers: CPU threads, GPU thread blocks (resident, or per launched op; a launched embedding op takes "
       "every block the GPU holds, if more)",
       1, 1024},
      {"queue_depth", SettingType::kInt, "64", "Slots of the work queue", 2, 65536},
      {"engine_handover_s", SettingType::kDouble, "120",
       "GPU persistent engine in the caller's process: an op its kernel has not started this long after the op "
       "before it ended fails the communicator, and its stream drains (a stream held behind the resident kernel)",
       0.001, 86400},
      {"engine_idle_us", SettingType::kInt, "200",
       "GPU: the persistent kernel exits after this long without work (so device-wide syncs return)", 1, 60000000},
      {"heap_bytes", SettingType::kSize, "256M",
       "Symmetric heap per rank for weft_mem_alloc (the control area comes on top)", 1 << 20, 1099511627776.0},
      {"tile_bytes", SettingType::kSize, kCpuBackend ? "64K" : "128K",
       "Largest tile (and the inbox slot size); ops are cut into ~64 tiles of at least 16K; a multiple of 256", 256,
       1 << 26},
      {"oneshot_max_bytes", SettingType::kSize, "auto",
       "AllReduce inputs up to this size go one-shot (each rank sums everyone's input); 0 disables; auto: 64K on "
       "the CPU backend; on GPUs with 128-byte lines (oneshot_protocol) 4M on 2 ranks, 2M on 3-4, 256K on more; "
       "with 8-byte lines 1M up to 4 ranks, 256K on more; with host-proxy peers 4K sent in all (4K / (ranks - 1); "
       "then auto on every rank or on none), and there it also bounds, up to that auto value, the All-to-All "
       "blocks that go staged through the one-shot's scratch",
       0, 1 << 26, true},
      {"oneshot_protocol", SettingType::kString, "auto",
       "Wire format of the one-shot AllReduce: ll128 (128-byte lines, 120 payload bytes each; needs NVLink between "
       "GPUs), ll (8 payload bytes in 16) or auto (ll128 from 128 KB sent in all on the CPU backend and on CUDA "
       "GPUs with an active NVLink, else ll)"},
      {"gemv_scratch_bytes", SettingType::kSize, kCpuBackend ? "64K" : "2M",
       "Largest float32 partials (32-row slices x batch x 4 bytes) the fused GEMV + AllReduce exchanges; "
       "larger runs unfused. The exchange's scratch is 4 x nranks times the larger of this and oneshot_max_bytes",
       0, 1 << 28},
      {"gemv_path", SettingType::kString, "auto",
       "GEMV + AllReduce: auto (the path table decides), fused (every rank reduces every slice), fused_rsag "
       "(each slice's owner reduces it and sends it on), unfused (weft's GEMV, then AllReduce) or blas (the vendor "
       "BLAS's GEMV, then AllReduce; as unfused where the engine has no vendor BLAS)"},
      {"gemm_path", SettingType::kString, "auto",
       "GEMM + All-to-All: auto (the path table decides), fused (weft's GEMM sends each tile as it is computed) or "
       "blas (the vendor BLAS's GEMM, then the op routes its rows; as fused where the engine has no vendor BLAS). "
       "Ranks may differ"},
      {"embedding_path", SettingType::kString, "auto",
       "Embedding-bag + All-to-All: auto (the path table decides), fused (each bag pooled straight into its "
       "destination) or unfused (every bag pooled into a buffer first, then sent as an All-to-All; as fused for "
       "the persistent engine's eager ops and weftd's). Ranks may differ"},
      {"path_table_file", SettingType::kString, "",
       "Path table for the fused ops (rows: op gpu ranks per_gpu max1 max2 max3 path measured; weftctl "
       "tune measure writes one); empty: the built-in conf/path_table.tsv"},
      {"check_indices", SettingType::kInt, "1",
       "Embedding ops check every index against its table (0: trust them, faster)", 0, 1},
      {"check_signatures", SettingType::kInt, "1",
       "Ranks compare each op's signature (kind, dtype, counts, the output block peers write into) before using a "
       "peer's data, and fail the op with WEFT_ERR_INVALID_USAGE where they differ (0: do not compare; the same "
       "on every rank)",
       0, 1},
      {"inbox_slots", SettingType::kInt, kCpuBackend ? "8" : "64", "Tiles in flight per peer pair", 1, 1024},
      {"transport", SettingType::kString, "auto",
       "Path between ranks: auto (p2p inside a node, the host proxy across), p2p (every peer mapped) or proxy "
       "(every peer through the host proxy)"},
      {"node_ranks", SettingType::kInt, "0",
       "Ranks per node: each block of this many ranks of a host counts as a node of its own, so that one host "
       "runs a multi-node job (ranks of different blocks talk through the host proxy); 0: the host is the node",
       0, 1 << 20},
      {"proxy_backend", SettingType::kString, "auto",
       "Network library of the host proxy: auto (UCX, else libfabric), ucx or ofi (same on every rank); UCX_TLS "
       "and FI_PROVIDER choose their transports"},
      {"proxy_eager_bytes", SettingType::kSize, "16K",
       "The host proxy carries a put (or each row of a tile) of at most this many bytes inside a message that the "
       "peer's proxy copies into place, so that the signal after it needs no round trip; larger ones are RMA "
       "writes; 0: always writes",
       0, 65536},
      {"proxy_batch_bytes", SettingType::kSize, "16K",
       "The host proxy sends the small messages to one peer it finds in its ring together (a tile's data and the "
       "signals after it, the next tile's) as one message; parts up to this many bytes of data join a batch, "
       "larger ones go alone; 0: every message alone (ranks need not agree)",
       0, 65536},
      {"proxy_lanes", SettingType::kInt, "0",
       "Lanes of the host proxy, each a thread with connections of its own (the same on every rank: the fewest "
       "any rank asks for); with more than one, every byte goes in messages spread over them; 0: auto (where "
       "the back-end's writes are CPU copies, as over tcp, half the process's CPUs per rank of the host, 1 to 4; "
       "else 1)",
       0, 16},
      {"proxy_cpu", SettingType::kInt, "-1", "PU (OS index) the host proxy's thread is bound to; -1: not bound", -1,
       1 << 20},
      {"status_pages", SettingType::kInt, "1",
       "Each communicator keeps a status page (its queue, recent ops, counters, first failure) for weftctl queue "
       "and diagnose; 0: none",
       0, 1},
      {"status_interval_ms", SettingType::kInt, "50",
       "GPU backends: how often the status watch brings the page up to date from the engine's words (ops end on "
       "the caller's stream, where no host wait sees them); 0: no watch (the page shows submits only)",
       0, 60000},
      {"status_dir", SettingType::kString, "",
       "Directory of the status pages, the user's own with mode 0700 (created so if missing); empty: "
       "/dev/shm/weft-<uid>"},
      {"service", SettingType::kString, "auto",
       "weftd: auto (attach to the node's weftd when its socket is found, else run embedded), on (require it) or "
       "off (always embedded)"},
      {"service_dir", SettingType::kString, "",
       "weftd's runtime directory (socket weftd.sock, lock weftd.lock), mode 0700 (0711 where other users are "
       "allowed); empty: the status directory (status_dir)"},
      {"service_allow_uids", SettingType::kString, "",
       "weftd: comma list of other uids it serves besides its own (their connections are checked by SO_PEERCRED)"},
      {"service_trust_uids", SettingType::kString, "",
       "Service mode: comma list of other uids whose weftd this user's ranks attach to (a shared weftd's User=); "
       "besides them only a weftd of this user or of root, whoever made the directory"},
      {"service_allow_gids", SettingType::kString, "",
       "weftd: comma list of groups whose members it serves (primary or supplementary group of the peer)"},
      {"service_engine", SettingType::kString, "rank",
       "Service mode: who runs the communicator's ops over the memory weftd makes: rank (the rank's own engine, "
       "as embedded: on GPUs a kernel per op on the caller's stream) or weftd (weftd's engine: on GPUs its "
       "persistent kernel, which the rank's stream hands each op through the shared queue; weftd's own user "
       "only, others get rank)"},
      {"service_staging_bytes", SettingType::kSize, "64M",
       "Service mode, service_engine weftd, CPU backend: a rank's staging segment, through which weftd's engine "
       "reads the inputs of an op that are not in the symmetric heap (0 is refused there; unused elsewhere)",
       0, 68719476736.0},
      {"service_mps", SettingType::kString, "auto",
       "weftd on GPUs: auto (use the MPS control daemon at CUDA_MPS_PIPE_DIRECTORY, else /tmp/nvidia-mps, if one "
       "answers; else start one with pipe and log directories under service_dir, quit when weftd exits) or off"},
      {"service_engine_ctas", SettingType::kInt, "32",
       "weftd: the most workers (GPU thread blocks, CPU threads) of the engine weftd runs for a rank, whose "
       "persistent_ctas asks for more: while weftd's kernel is on the GPU, the SMs it holds are lost to the "
       "ranks' own kernels",
       1, 1024},
      {"service_engine_idle_us", SettingType::kInt, "1000",
       "weftd on GPUs: how long (us) the engine's kernel waits on an empty queue before it leaves the GPU; the "
       "rank's next op asks weftd to start it again (tens of us). weftd frees GPU memory only while none of its "
       "kernels runs; 0: never leave (nothing is freed until every communicator on the GPUs has ended)",
       0, 60000000},
      {"service_drain_s", SettingType::kDouble, "30",
       "weftd: on SIGTERM, how long it waits for attached communicators to end before it exits", 0, 86400},
      {"service_user_clients", SettingType::kInt, "256",
       "weftd: the most connections one user may hold open at once (a connection past it is refused, naming "
       "this setting)",
       1, 1024},
      {"service_user_bytes", SettingType::kSize, "0",
       "weftd: the most memory (heaps and staging segments) weftd holds for one user's communicators at once; an "
       "attach past it is refused, naming this setting; 0: half of the node's physical memory",
       0, 1125899906842624.0},
      {"log_level", SettingType::kString, "warn", "error, warn, info, debug or trace"},
      {"log_subsys", SettingType::kString, "all",
       "Comma list of init,bootstrap,heap,queue,engine,p2p,proxy,ucx,ofi,api,config,service or all"},
      {"log_file", SettingType::kString, "", "Log file instead of stderr; %h = host name, %p = pid"},
  };
  return kSpecs;
}

std::string envName(const char* setting) {
  std::string s = "WEFT_";
  for (const char* p = setting; *p; ++p) s += static_cast<char>(std::toupper(static_cast<unsigned char>(*p)));
  return s;
}

int64_t parseInteger(const std::string& name, const std::string& text, bool allowSuffix) {
  size_t pos = 0;
  long long v = 0;
  try {
    v = std::stoll(text, &pos, 0);
  } catch (const std::exception&) {
    throw Error(Code::kInvalidArgument, name + ": '" + text + "' is not an integer");
  }
  std::string rest = text.substr(pos);
  while (!rest.empty() && std::isspace(static_cast<unsigned char>(rest.back()))) rest.pop_back();
  int shift = 0;
  if (allowSuffix && !rest.empty()) {
    char c = static_cast<char>(std::toupper(static_cast<unsigned char>(rest[0])));
    shift = c == 'K' ? 10 : c == 'M' ? 20 : c == 'G' ? 30 : c == 'T' ? 40 : -1;
    if (shift > 0 && (rest.size() == 1 || rest.substr(1) == "iB" || rest.substr(1) == "B")) rest.clear();
  }
  if (!rest.empty()) throw Error(Code::kInvalidArgument, name + ": '" + text + "' is not an integer");
  if (shift > 0 && (v < 0 || v > (INT64_MAX >> shift)))
    throw Error(Code::kInvalidArgument, name + ": '" + text + "' is too large");
  return static_cast<int64_t>(v) << shift;
}

double parseDouble(const std::string& name, const std::string& text) {
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(v))
    throw Error(Code::kInvalidArgument, name + ": '" + text + "' is not a number");
  return v;
}

std::vector<uint32_t> parseIdList(const std::string& name, const std::string& text) {
  std::vector<uint32_t> ids;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const size_t b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
    const std::string id = b == std::string::npos ? "" : item.substr(b, e - b + 1);
    const bool digits = !id.empty() && id.size() <= 10 && id.find_first_not_of("0123456789") == std::string::npos;
    const unsigned long long v = digits ? std::strtoull(id.c_str(), nullptr, 10) : 0;
    // 4294967295 is (uid_t)-1, which names no user.
    if (!digits || v >= 0xffffffffull)
      throw Error(Code::kInvalidArgument, name + ": '" + id + "' is not a numeric id (comma list of ids expected)");
    ids.push_back(static_cast<uint32_t>(v));
  }
  return ids;
}

namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

std::string fmtNumber(double d) {
  char b[32];
  snprintf(b, sizeof b, "%.15g", d);
  return b;
}

// Settings that were replaced: naming one is an error that says what replaced it, never silently
// ignored (a job would run on the built-in table while its operator thinks it runs on theirs).
struct Renamed {
  const char* old;
  const char* now;
};
constexpr Renamed kRenamed[] = {{"gemv_tuning_file",
                                 "path_table_file (one table for every fused op, in a new format; weftctl tune measure "
                                 "writes one, README: \"Retuning for your machine\")"}};

std::string unknownSetting(const std::string& name) {
  for (const Renamed& r : kRenamed)
    if (name == r.old) return "setting '" + name + "' was replaced by " + r.now;
  return "unknown setting '" + name + "'";
}

const SettingSpec& spec(const std::string& name) {
  for (const auto& s : settingSpecs())
    if (name == s.name) return s;
  throw Error(Code::kInvalidArgument, unknownSetting(name));
}

// The checks log::configure makes at init, made here too so that weftctl agrees with init.
void validateLogSetting(const std::string& name, const std::string& where, const std::string& text) {
  try {
    if (name == "log_level") log::parseLevel(text);
    if (name == "log_subsys") log::parseSubsys(text);
    if (name == "log_file" && !text.empty()) log::checkFileDirectory(text);
  } catch (const Error& e) {
    const std::string why = e.what();
    const size_t colon = why.find(": ");
    throw Error(e.code(), where + ": " + (colon == std::string::npos ? why : why.substr(colon + 2)));
  }
}

void validate(const SettingSpec& s, const SettingValue& v) {
  if (s.autoValue && v.text == "auto") return;
  const std::string where =
      std::string(s.name) + " (from " + (v.origin.empty() ? sourceName(v.source) : v.origin) + ")";
  double num = 0;
  switch (s.type) {
    case SettingType::kInt:
      num = static_cast<double>(parseInteger(where, v.text, false));
      break;
    case SettingType::kSize:
      try {
        num = static_cast<double>(parseInteger(where, v.text, true));
      } catch (const Error& e) {
        if (!s.autoValue) throw;
        throw Error(e.code(), std::string(e.what()) + " (nor auto)");
      }
      break;
    case SettingType::kDouble:
      num = parseDouble(where, v.text);
      break;
    case SettingType::kString:
      if (std::string(s.name) == "transport" && v.text != "auto" && v.text != "p2p" && v.text != "proxy")
        throw Error(Code::kInvalidArgument, where + ": '" + v.text + "' is not auto, p2p or proxy");
      if (std::string(s.name) == "oneshot_protocol" && v.text != "auto" && v.text != "ll" && v.text != "ll128")
        throw Error(Code::kInvalidArgument, where + ": '" + v.text + "' is not auto, ll or ll128");
      if (std::string(s.name) == "proxy_backend" && v.text != "auto" && v.text != "ucx" && v.text != "ofi")
        throw Error(Code::kInvalidArgument, where + ": '" + v.text + "' is not auto, ucx or ofi");
      if (std::string(s.name) == "service" && v.text != "auto" && v.text != "on" && v.text != "off")
        throw Error(Code::kInvalidArgument, where + ": '" + v.text + "' is not auto, on or off");
      if (std::string(s.name) == "service_engine" && v.text != "rank" && v.text != "weftd")
        throw Error(Code::kInvalidArgument, where + ": '" + v.text + "' is not rank or weftd");
      if (std::string(s.name) == "service_mps" && v.text != "auto" && v.text != "off")
        throw Error(Code::kInvalidArgument, where + ": '" + v.text + "' is not auto or off");
      if (std::string(s.name) == "service_allow_uids" || std::string(s.name) == "service_allow_gids" ||
          std::string(s.name) == "service_trust_uids")
        parseIdList(where, v.text);
      if (std::string(s.name) == "engine" && v.text != "launched" && v.text != "persistent")
        throw Error(Code::kInvalidArgument, where + ": '" + v.text + "' is not launched or persistent");
      validateLogSetting(s.name, where, v.text);
      return;
  }
  if (std::string(s.name) == "tile_bytes" && static_cast<int64_t>(num) % 256 != 0)
    throw Error(Code::kInvalidArgument, where + ": " + v.text + " is not a multiple of 256");
  if (num < s.min || num > s.max)
    throw Error(Code::kInvalidArgument,
                where + ": " + v.text + " is outside [" + fmtNumber(s.min) + ", " + fmtNumber(s.max) + "]");
}

}  // namespace

namespace {

const char* fileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

std::string readTextFile(const std::string& path, const std::string& what) {
  const std::string name = what + " '" + path + "'";
  // O_NONBLOCK: opening a FIFO without a writer must not wait.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw Error(Code::kInvalidArgument, systemErrorMessage(name + ": cannot be opened", errno));
  struct stat st {};
  std::string text;
  try {
    if (fstat(fd, &st) != 0) throw Error(Code::kInvalidArgument, systemErrorMessage(name + ": stat", errno));
    if (!S_ISREG(st.st_mode))
      throw Error(Code::kInvalidArgument, name + ": is " + fileKind(st.st_mode) + ", not a regular file");
    const std::string tooLarge = name + ": is larger than " + std::to_string(kMaxTextFileBytes >> 10) + " KiB";
    if (static_cast<uint64_t>(st.st_size) > kMaxTextFileBytes) throw Error(Code::kInvalidArgument, tooLarge);
    // Read one byte past the bound, so that a file that grew since fstat is refused too.
    text.resize(kMaxTextFileBytes + 1);
    size_t got = 0;
    while (got < text.size()) {
      const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
      if (n == 0) break;
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw Error(Code::kInvalidArgument, systemErrorMessage(name + ": read", errno));
      got += static_cast<size_t>(n);
    }
    if (got > kMaxTextFileBytes) throw Error(Code::kInvalidArgument, tooLarge);
    text.resize(got);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return text;
}

std::map<std::string, SettingValue> parseConfigFile(const std::string& path) {
  return parseConfigText(readTextFile(path, "config file"), path);
}

std::map<std::string, SettingValue> parseConfigText(const std::string& text, const std::string& origin) {
  std::istringstream in(text);
  std::map<std::string, SettingValue> out;
  std::string line;
  for (int lineNo = 1; std::getline(in, line); ++lineNo) {
    const std::string where = origin + ":" + std::to_string(lineNo);
    std::string s = line;
    bool inQuote = false;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '"') inQuote = !inQuote;
      if (s[i] == '#' && !inQuote) {
        s.resize(i);
        break;
      }
    }
    s = trim(s);
    if (s.empty()) continue;
    if (s.front() == '[') {
      if (s != "[weft]") throw Error(Code::kInvalidArgument, where + ": only a [weft] section is allowed");
      continue;
    }
    size_t eq = s.find('=');
    if (eq == std::string::npos) throw Error(Code::kInvalidArgument, where + ": expected key = value");
    std::string key = trim(s.substr(0, eq));
    std::string val = trim(s.substr(eq + 1));
    if (val.size() >= 2 && val.front() == '"' && val.back() == '"') val = val.substr(1, val.size() - 2);
    try {
      spec(key);
    } catch (const Error&) {
      throw Error(Code::kInvalidArgument, where + ": " + unknownSetting(key));
    }
    out[key] = SettingValue{val, Source::kFile, where};
  }
  return out;
}

Settings Settings::resolve(const std::map<std::string, std::string>& api) {
  return resolve(api, [](const char* n) { return std::getenv(n); });
}

Settings Settings::resolve(const std::map<std::string, std::string>& api, const Getenv& getenv) {
  Settings st;
  std::map<std::string, SettingValue> file;
  if (const char* path = getenv("WEFT_CONFIG_FILE"); path && *path) {
    st.configFile_ = path;
    file = parseConfigFile(path);
  }
  for (const Renamed& r : kRenamed)
    if (const char* e = getenv(envName(r.old).c_str()); e && *e)
      throw Error(Code::kInvalidArgument, envName(r.old) + ": " + unknownSetting(r.old));
  for (const auto& s : settingSpecs()) {
    SettingValue v{s.defaultValue, Source::kDefault, ""};
    if (auto it = file.find(s.name); it != file.end()) v = it->second;
    const std::string env = envName(s.name);
    if (const char* e = getenv(env.c_str()); e && *e) v = SettingValue{e, Source::kEnv, env};
    if (auto it = api.find(s.name); it != api.end()) v = SettingValue{it->second, Source::kApi, "weft_config_t"};
    validate(s, v);
    st.values_[s.name] = v;
  }
  for (const auto& [k, _] : api) spec(k);
  return st;
}

const SettingValue& Settings::value(const char* name) const {
  auto it = values_.find(name);
  if (it == values_.end()) throw Error(Code::kInternal, std::string("setting '") + name + "' is not in the table");
  return it->second;
}

int64_t Settings::getInt(const char* name) const {
  const SettingValue& v = value(name);
  return parseInteger(name, v.text, spec(name).type == SettingType::kSize);
}

bool Settings::isAuto(const char* name) const { return spec(name).autoValue && value(name).text == "auto"; }

// Measured on H200 (docs/archive/perf-journal-2026-11.md): one-shot beats reduce-scatter + all-gather up to 1 MB on 2
// ranks and on 4 (at 512 KB-1 MB the two-hop path's tiles each wait on an inbox handshake); more
// ranks are unmeasured, and one-shot reads every peer's input per element.
uint64_t autoOneShotBytes(int nranks, bool lines) {
  if (kCpuBackend) return 64 << 10;
  // 128-byte lines on H200 (docs/archive/perf-journal-2026-11.md): one-shot beat reduce-scatter + all-gather up
  // to 4M on 2 ranks (about even at 8M) and to 2M on 4 (at 4M the two-hop path won). The 8-byte
  // lines, with twice the bytes, break even at 1M.
  if (lines && nranks == 2) return 4 << 20;
  if (nranks <= 4) return lines ? 2 << 20 : 1 << 20;
  return 256 << 10;
}

namespace {
// `sent` bytes in all (input x peers) as an input per peer, in whole 8-byte words.
uint64_t perPeerOf(uint64_t sent, int nranks) {
  const uint64_t perPeer = sent / static_cast<uint64_t>(nranks > 1 ? nranks - 1 : 1);
  return std::max<uint64_t>(perPeer / 8 * 8, 8);
}
}  // namespace

// Through the host proxy the one-shot sends a message of flagged words per peer, each word stored
// alone at the peer, and the reduce-scatter + all-gather at least two messages in turn, each a
// trip through both proxies. Measured with 2 ranks over UCX tcp (docs/perf.md, "Small ops"): up to
// 4 KB the one-shot took under half the time on 2 H200 and on the CPU backend (32 cores); at 8 KB
// it still won on the GPUs (52-53 us against 65-75) but lost on the CPU backend (42 against 34-35);
// at 16 KB it lost on the GPUs (79-80 against 74-78), and at 32 KB it was several times slower on
// both. The bound is on what an op sends in all, as the one-shot's messages grow with the peers.
uint64_t autoProxyOneShotBytes(int nranks) { return perPeerOf(kCpuBackend ? 4 << 10 : 8 << 10, nranks); }

// The staged All-to-All was measured faster than its two trips up to 4 KB sent in all (2 H200 and
// the CPU backend's 32 cores, 2 ranks over UCX tcp); past that it is not measured.
uint64_t autoProxyStagedBytes(int nranks) { return perPeerOf(4 << 10, nranks); }

double Settings::getDouble(const char* name) const { return parseDouble(name, value(name).text); }

const std::string& Settings::getString(const char* name) const { return value(name).text; }

}  // namespace weft

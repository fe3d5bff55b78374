// UCX_TLS as UCX reads it, without UCX: which transports a value lets UCX use. Kept apart from the
// back-end so that it is tested, and used, where UCX is not built.
#pragma once

namespace weft::transport {

// Whether UCX may use its tcp transport under UCX_TLS = `tls` (null: unset): unset, empty or
// "all" let it use every transport; "^a,b" every transport but those; else the list itself, where
// "all" and "tcp" name it.
bool ucxTlsMayUseTcp(const char* tls);

// What UCX_TLS = `tls` says of UCX's RDMA transports (rc, dc, ud, ib, mlx5, gga and their variants,
// such as rc_x): kNamed where the list names one; kIfPresent where it lets UCX use whatever the
// host has (unset, empty, "all" among its names, or an exclusion list); kNone where a list of
// transports names none of them.
enum class UcxRdma { kNamed, kIfPresent, kNone };
UcxRdma ucxTlsRdma(const char* tls);

}  // namespace weft::transport

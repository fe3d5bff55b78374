// torch.ops.weft.*: the schemas, and the kernels that check their arguments and call the C API on
// the caller's current stream. Mutated outputs are schema arguments (Tensor(a!)) with no aliasing
// return, the form torch.compile's auto-functionalization accepts for custom ops.
#include <torch/library.h>

#include "checks.hpp"
#include "device.hpp"
#include "errors.hpp"

namespace weft::torch_ext {
namespace {

bool overlap(const at::Tensor& a, const at::Tensor& b) {
  if (a.is_meta() || a.numel() == 0 || b.numel() == 0) return false;
  const auto a0 = reinterpret_cast<uintptr_t>(a.data_ptr()), b0 = reinterpret_cast<uintptr_t>(b.data_ptr());
  return a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

template <bool kMeta>
void allreduceInPlace(at::Tensor tensor, int64_t comm) {
  auto s = lookupComm(comm, "weft.allreduce_");
  const ArgCheck c{"weft.allreduce_", *s, kMeta};
  const weft_dtype_t dt = c.floating(tensor, "tensor");
  c.symmetric(tensor, "tensor");
  if (!kMeta)
    check(weft_allreduce(s->handle(), tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), dt,
                         currentStream(tensor.device())),
          "weft_allreduce");
}

template <bool kMeta>
void allToAllSingle(at::Tensor output, const at::Tensor& input, int64_t comm) {
  auto s = lookupComm(comm, "weft.all_to_all_single");
  const ArgCheck c{"weft.all_to_all_single", *s, kMeta};
  const weft_dtype_t dt = c.floating(input, "input");
  c.floating(output, "output");
  c.sameDtype(output, "output", input, "input");
  TORCH_CHECK_VALUE(input.numel() % s->size() == 0, "weft.all_to_all_single: input: ", input.numel(),
                    " elements do not split into ", s->size(), " equal blocks (one per rank)");
  TORCH_CHECK_VALUE(output.numel() == input.numel(), "weft.all_to_all_single: output: has ", output.numel(),
                    " elements, input has ", input.numel(), "; they must match");
  c.symmetric(output, "output");
  TORCH_CHECK_VALUE(!overlap(output, input), "weft.all_to_all_single: output: overlaps input (not in place)");
  if (!kMeta)
    check(weft_alltoall(s->handle(), input.data_ptr(), output.data_ptr(), input.numel() / s->size(), dt,
                        currentStream(input.device())),
          "weft_alltoall");
}

template <bool kMeta>
void gemvAllReduce(const at::Tensor& x, const at::Tensor& weight, at::Tensor out, int64_t comm) {
  auto s = lookupComm(comm, "weft.gemv_allreduce");
  const ArgCheck c{"weft.gemv_allreduce", *s, kMeta};
  const weft_dtype_t dt = c.floating(x, "x");
  c.floating(weight, "weight");
  c.floating(out, "out");
  c.sameDtype(weight, "weight", x, "x");
  c.sameDtype(out, "out", x, "x");
  c.dims(x, "x", 2);
  c.dims(weight, "weight", 2);
  const int64_t batch = x.size(0), kLocal = x.size(1), n = weight.size(0);
  TORCH_CHECK_VALUE(batch >= 1 && batch <= 64, "weft.gemv_allreduce: x: batch (dim 0) is ", batch,
                    "; the fused op takes 1..64 rows (use matmul + allreduce_ beyond)");
  TORCH_CHECK_VALUE(weight.size(1) == kLocal, "weft.gemv_allreduce: weight: shape ", weight.sizes(),
                    " does not match x ", x.sizes(), " (weight is [n, k_local], as nn.Linear's)");
  c.shape(out, "out", {batch, n});
  c.symmetric(out, "out");
  TORCH_CHECK_VALUE(!overlap(out, x) && !overlap(out, weight), "weft.gemv_allreduce: out: overlaps x or weight");
  if (!kMeta)
    check(weft_gemv_allreduce(s->handle(), x.data_ptr(), weight.data_ptr(), out.data_ptr(), batch, n, kLocal, dt,
                              currentStream(x.device())),
          "weft_gemv_allreduce");
}

template <bool kMeta>
at::Tensor gemmAllToAll(const at::Tensor& a, const at::Tensor& weight, const at::Tensor& sendCounts, at::Tensor recv,
                        int64_t comm, const c10::optional<at::Tensor>& expertOffsets) {
  const char* op = "weft.gemm_all_to_all";
  auto s = lookupComm(comm, op);
  const ArgCheck c{op, *s, kMeta};
  const weft_dtype_t dt = c.floating(a, "a", /*halfOnly=*/true);
  c.floating(weight, "weight", true);
  c.floating(recv, "recv", true);
  c.sameDtype(weight, "weight", a, "a");
  c.sameDtype(recv, "recv", a, "a");
  c.dims(a, "a", 2);
  c.dims(recv, "recv", 2);
  TORCH_CHECK_VALUE(weight.dim() == 2 || weight.dim() == 3, op, ": weight: must be [k, h] or [experts, k, h], got ",
                    weight.sizes());
  const int64_t experts = weight.dim() == 3 ? weight.size(0) : 1;
  const int64_t k = weight.size(weight.dim() - 2), h = weight.size(weight.dim() - 1);
  TORCH_CHECK_VALUE(a.size(1) == k, op, ": a: shape ", a.sizes(), " does not match weight ", weight.sizes());
  TORCH_CHECK_VALUE(recv.size(1) == h, op, ": recv: has ", recv.size(1), " columns, weight has h = ", h);
  c.dense(sendCounts, "send_counts", at::kLong);
  c.shape(sendCounts, "send_counts", {s->size()});
  const int64_t* offsets = nullptr;
  if (expertOffsets.has_value()) {
    c.dense(*expertOffsets, "expert_offsets", at::kLong);
    c.shape(*expertOffsets, "expert_offsets", {experts});
    if (!kMeta) offsets = expertOffsets->data_ptr<int64_t>();
  } else {
    TORCH_CHECK_VALUE(experts == 1, op, ": expert_offsets: needed with ", experts, " experts");
  }
  c.symmetric(recv, "recv");
  for (const auto* in : {&a, &weight, &sendCounts})
    TORCH_CHECK_VALUE(!overlap(recv, *in), op, ": recv: overlaps an input");
  at::Tensor recvCounts = at::empty({s->size()}, sendCounts.options());
  if (!kMeta)
    check(weft_grouped_gemm_alltoall(s->handle(), a.data_ptr(), weight.data_ptr(), experts, offsets,
                                     sendCounts.data_ptr<int64_t>(), recv.data_ptr(), recv.size(0),
                                     recvCounts.data_ptr<int64_t>(), a.size(0), k, h, dt, currentStream(a.device())),
          "weft_grouped_gemm_alltoall");
  return recvCounts;
}

template <bool kMeta>
void embeddingBagAllToAll(const at::Tensor& weights, const at::Tensor& tableOffsets, const at::Tensor& indices,
                          const at::Tensor& offsets, const c10::optional<at::Tensor>& perSampleWeights, at::Tensor recv,
                          int64_t tableBase, int64_t mode, int64_t comm) {
  const char* op = "weft.embedding_bag_all_to_all";
  auto s = lookupComm(comm, op);
  const ArgCheck c{op, *s, kMeta};
  const weft_dtype_t dt = c.floating(weights, "weights");
  c.floating(recv, "recv");
  c.sameDtype(recv, "recv", weights, "weights");
  c.dims(weights, "weights", 2);
  c.dims(recv, "recv", 3);
  c.dense(tableOffsets, "table_offsets", at::kLong);
  c.dense(indices, "indices", at::kLong);
  c.dense(offsets, "offsets", at::kLong);
  c.dims(tableOffsets, "table_offsets", 1);
  c.dims(indices, "indices", 1);
  c.dims(offsets, "offsets", 1);
  TORCH_CHECK_VALUE(tableOffsets.numel() >= 1, op, ": table_offsets: needs num_tables + 1 entries (at least 1)");
  TORCH_CHECK_VALUE(mode == 0 || mode == 1, op, ": mode: ", mode, " is neither 0 (sum) nor 1 (mean)");
  const int64_t tables = tableOffsets.numel() - 1;
  const int64_t localBatch = recv.size(0), totalTables = recv.size(1), dim = recv.size(2);
  TORCH_CHECK_VALUE(weights.size(1) == dim, op, ": weights: has ", weights.size(1), " columns, recv has dim ", dim);
  const int64_t bags = tables * localBatch * s->size();
  TORCH_CHECK_VALUE(tables == 0 || offsets.numel() == bags + 1, op, ": offsets: has ", offsets.numel(), " entries; ",
                    tables, " tables x global batch ", localBatch * s->size(), " bags need ", bags + 1);
  const float* psw = nullptr;
  if (perSampleWeights.has_value()) {
    c.dense(*perSampleWeights, "per_sample_weights", at::kFloat);
    c.shape(*perSampleWeights, "per_sample_weights", indices.sizes());
    if (!kMeta) psw = perSampleWeights->data_ptr<float>();
  }
  c.symmetric(recv, "recv");
  for (const auto* in : {&weights, &tableOffsets, &indices, &offsets})
    TORCH_CHECK_VALUE(!overlap(recv, *in), op, ": recv: overlaps an input");
  if (!kMeta)
    check(weft_embedding_alltoall(s->handle(), weights.data_ptr(), tableOffsets.data_ptr<int64_t>(), tables,
                                  indices.numel() ? indices.data_ptr<int64_t>() : nullptr, offsets.data_ptr<int64_t>(),
                                  psw, static_cast<weft_pool_mode_t>(mode), recv.data_ptr(), localBatch, totalTables,
                                  tableBase, dim, dt, currentStream(weights.device())),
          "weft_embedding_alltoall");
}

}  // namespace

TORCH_LIBRARY(weft, m) {
  m.def("allreduce_(Tensor(a!) tensor, int comm) -> ()");
  m.def("all_to_all_single(Tensor(a!) output, Tensor input, int comm) -> ()");
  m.def("gemv_allreduce(Tensor x, Tensor weight, Tensor(a!) out, int comm) -> ()");
  m.def(
      "gemm_all_to_all(Tensor a, Tensor weight, Tensor send_counts, Tensor(a!) recv, int comm, "
      "Tensor? expert_offsets=None) -> Tensor");
  m.def(
      "embedding_bag_all_to_all(Tensor weights, Tensor table_offsets, Tensor indices, Tensor offsets, "
      "Tensor? per_sample_weights, Tensor(a!) recv, int table_base, int mode, int comm) -> ()");
}

// One kernel for every backend key: it checks each tensor's device against the communicator's, so
// a tensor on the wrong device is a ValueError naming it rather than a missing-kernel error.
TORCH_LIBRARY_IMPL(weft, CompositeExplicitAutograd, m) {
  m.impl("allreduce_", &allreduceInPlace<false>);
  m.impl("all_to_all_single", &allToAllSingle<false>);
  m.impl("gemv_allreduce", &gemvAllReduce<false>);
  m.impl("gemm_all_to_all", &gemmAllToAll<false>);
  m.impl("embedding_bag_all_to_all", &embeddingBagAllToAll<false>);
}

// The ops have no gradient; passing autograd by leaves every backend (Meta included, which 1.13
// gives no autograd fallthrough of its own) to the kernels above and below.
TORCH_LIBRARY_IMPL(weft, Autograd, m) {
  for (const char* op :
       {"allreduce_", "all_to_all_single", "gemv_allreduce", "gemm_all_to_all", "embedding_bag_all_to_all"})
    m.impl(op, torch::CppFunction::makeFallthrough());
}

// Shape inference (torch.compile's fake tensors run it): the same checks, nothing enqueued.
TORCH_LIBRARY_IMPL(weft, Meta, m) {
  m.impl("allreduce_", &allreduceInPlace<true>);
  m.impl("all_to_all_single", &allToAllSingle<true>);
  m.impl("gemv_allreduce", &gemvAllReduce<true>);
  m.impl("gemm_all_to_all", &gemmAllToAll<true>);
  m.impl("embedding_bag_all_to_all", &embeddingBagAllToAll<true>);
}

}  // namespace weft::torch_ext

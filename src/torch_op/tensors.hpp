#pragma once
// torch tensors as libkda TensorViews, and the operators' new outputs.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

#include "kda/tensor.hpp"

namespace kda::torch_op {

// libkda's dtype code of a torch dtype, when it has one (the codes are libkda's to accept or refuse
// per argument: int32/int64 only for the index tensors, float64 nowhere yet).
bool dtype_code(at::ScalarType type, DType* out);

// The dtypes an argument takes, as libkda's messages list them (the ctypes path's
// _signatures.DTYPES_*): what a tensor of a dtype libkda has no code for (bool, int8, complex)
// is told, instead of every dtype libkda has a code for. X's rows ("... (the dtype of q)", with
// the operator's anchor for q) are made per operator (ops.cpp, dtypes_of).
inline constexpr const char* kDtypesX = "float16, bfloat16 or float32";
inline constexpr const char* kDtypesOfH = "float16, bfloat16 or float32 (the dtype of h)";
inline constexpr const char* kDtypesF32 = "float32";
inline constexpr const char* kDtypesIndex = "int32 or int64";

// The view of argument `name` of operator `op` (its fla name): pointer, dtype, shape, element
// strides, device. Throws c10::TypeError for None (an undefined tensor: the dispatcher passes
// None for a required tensor) and for a dtype libkda has no code for (saying `dtypes`, what the
// argument takes), and c10::ValueError for a non-strided or nested tensor, a device other than
// cpu/cuda or a rank a TensorView cannot hold (above kMaxRank, worded as the C ABI words it),
// naming the argument; every other rule (ranks, shapes, dtypes per argument, devices) is
// libkda's to check.
TensorView input_view(const at::Tensor& tensor, const char* op, const char* name,
                      const char* dtypes);
// An omitted optional argument is the empty view.
TensorView input_view(const std::optional<at::Tensor>& tensor, const char* op, const char* name,
                      const char* dtypes);
// The view of an output made by new_output (contiguous, writable).
TensorView output_view(const at::Tensor& tensor);

// Extent `dim` of `tensor` when it has rank `rank`, else 0. Outputs are sized from inputs whose
// ranks libkda checks only later: a wrong rank then gives an empty output and libkda's error
// naming the input, never an allocation sized by a wrong extent.
int64_t extent(const at::Tensor& tensor, int64_t rank, int64_t dim);

// A new contiguous tensor of `sizes` and `dtype` on q's device.
at::Tensor new_output(const at::Tensor& q, c10::IntArrayRef sizes, at::ScalarType dtype);

// Contiguous views standing for outputs not allocated yet, so that a call whose outputs cannot
// be allocated is validated all the same (outputs.hpp). They lie at addresses from 2^58 on,
// above every user-space address of a 64-bit Linux process (2^57 at most, with 5-level paging),
// where no input lies, host or device (CUDA's unified addresses are user-space ones): they
// overlap no input, as the real outputs will not. Validation reads descriptors only (and the
// contents of host index tensors, which are inputs), so these addresses are never dereferenced.
// The same layout as the ctypes path's (_problem.Operator.validate_before_allocating).
class Placeholders {
 public:
  explicit Placeholders(const at::Tensor& q);
  // The next placeholder of `sizes` and `dtype`; false when it would end past 2^63 (outputs far
  // beyond any memory: not described, the run validates anyway).
  bool next(c10::IntArrayRef sizes, at::ScalarType dtype, TensorView* out);

 private:
  uint64_t address_ = uint64_t{1} << 58;
  Device device_;
};

}  // namespace kda::torch_op

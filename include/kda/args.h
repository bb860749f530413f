/* The operators' tables: each operator's header kda/ops/<op>_args.h lists its arguments once, as
 * an X-macro `KDA_<OP>_ARGS(X)` with one row `X(member, name, role, type, rank, rule, doc)` per
 * argument, in the order of fla's signature (the tensors and options callers pass), then the
 * outputs in the order they are returned. Every face of the operator is built from that one list:
 * the C and C++ problem structs, the C ABI's entries and its kda_op_arg introspection, validation
 * of presence and ranks, the outputs' shapes and dtypes (allocation everywhere), safetensors I/O,
 * the command line, the compiled torch op and its schema, and the Python package's signatures
 * (python/kda_kernels/op_tables.json, written by the kda_op_tables tool from these rows).
 *   member  the struct member (`do_` for `do`, a C++ keyword)
 *   name    the argument's name in fla's signature and in safetensors files; outputs are
 *           "out.<name>" (the name under which they are returned)
 *   role    KDA_ARG_INPUT, KDA_ARG_OPTIONAL (a tensor that may be omitted), KDA_ARG_OPTION (a
 *           scalar option) or KDA_ARG_OUTPUT
 *   type    tensors: the dtypes taken (KDA_TYPE_X ... KDA_TYPE_INDEX; an output is KDA_TYPE_OF_Q,
 *           stored in X, or KDA_TYPE_F32); options: KDA_TYPE_BOOL (an int32_t 0 or 1 in
 *           the C struct), KDA_TYPE_INT (int64_t) or KDA_TYPE_FLOAT_OR_NONE (int32_t has_<member>
 *           then double <member>; none by default)
 *   rank    a tensor's rank; 0 for options
 *   rule    an output's shape: one "<input>.<dim>" per extent ("q.0 q.1 v.2 q.3": B, T from q,
 *           HV from v, K from q; a term without a dot is an extent the problem names, e.g.
 *           "chunks"); an option's default ("64", "false", "none"); "" for inputs
 *   doc     shape and dtype (tensors) or meaning (options), for messages and documentation
 * The first row is the operator's anchor, KDA_TYPE_X (q; chunk_fwd_h's k): its dtype is X and
 * its device the one every tensor shares; messages name it ("the dtype of q"). */
#ifndef KDA_ARGS_H_
#define KDA_ARGS_H_

/* Enumerators, not macros: the tables' role and type tokens are pasted into the names of the
 * selector macros below, so they must not expand. */
enum kda_arg_role {
  KDA_ARG_INPUT = 0,
  KDA_ARG_OPTIONAL = 1,
  KDA_ARG_OUTPUT = 2,
  KDA_ARG_OPTION = 3
};

enum kda_arg_type {
  KDA_TYPE_X = 0,           /* float16, bfloat16 or float32: the first row (q), which sets X */
  KDA_TYPE_OF_Q = 1,        /* X, the dtype of the first row (q) */
  KDA_TYPE_OF_Q_OR_F32 = 2, /* X or float32 */
  KDA_TYPE_OF_H = 3,        /* the dtype of h */
  KDA_TYPE_F32 = 4,
  KDA_TYPE_INDEX = 5, /* int32 or int64 */
  KDA_TYPE_BOOL = 6,
  KDA_TYPE_INT = 7,
  KDA_TYPE_FLOAT_OR_NONE = 8
};

/* KDA_WHEN_TENSOR_##role(...) and KDA_WHEN_OPTION_##role(...) keep their arguments for rows of
 * that kind and drop them for the others: how a table expansion picks its rows. */
#define KDA_WHEN_TENSOR_KDA_ARG_INPUT(...) __VA_ARGS__
#define KDA_WHEN_TENSOR_KDA_ARG_OPTIONAL(...) __VA_ARGS__
#define KDA_WHEN_TENSOR_KDA_ARG_OUTPUT(...) __VA_ARGS__
#define KDA_WHEN_TENSOR_KDA_ARG_OPTION(...)
#define KDA_WHEN_OPTION_KDA_ARG_INPUT(...)
#define KDA_WHEN_OPTION_KDA_ARG_OPTIONAL(...)
#define KDA_WHEN_OPTION_KDA_ARG_OUTPUT(...)
#define KDA_WHEN_OPTION_KDA_ARG_OPTION(...) __VA_ARGS__

/* The C problem struct's fields: its options first (after abi_version), then one kda_tensor per
 * tensor row, each group in table order. */
#define KDA_C_FIELD_KDA_TYPE_BOOL(member) int32_t member;
#define KDA_C_FIELD_KDA_TYPE_INT(member) int64_t member;
#define KDA_C_FIELD_KDA_TYPE_FLOAT_OR_NONE(member) \
  int32_t has_##member;                            \
  double member;
#define KDA_DECLARE_C_OPTION(member, name, role, type, rank, rule, doc) \
  KDA_WHEN_OPTION_##role(KDA_C_FIELD_##type(member))
#define KDA_DECLARE_C_TENSOR(member, name, role, type, rank, rule, doc) \
  KDA_WHEN_TENSOR_##role(kda_tensor member;)

/* The C problem struct and entry points of operator `op` whose table is `ARGS`:
 *   kda_<op>_problem, kda_<op>_validate(problem), kda_<op>_run(problem, backend, kernel, stream).
 * _validate checks the problem against the contract without running anything; _run validates,
 * then runs on `backend` (KDA_BACKEND_*) with `kernel` (KDA_KERNEL_*); `stream` is a
 * cudaStream_t for KDA_BACKEND_CUDA (NULL: the default stream) and ignored otherwise. */
#define KDA_DECLARE_C_OP(UP, op, Cxx, fla_name, spec)                                   \
  typedef struct kda_##op##_problem {                                                   \
    int32_t abi_version; /* = KDA_ABI_VERSION */                                        \
    KDA_##UP##_ARGS(KDA_DECLARE_C_OPTION) KDA_##UP##_ARGS(KDA_DECLARE_C_TENSOR)         \
  } kda_##op##_problem;                                                                 \
  KDA_API kda_status kda_##op##_validate(const kda_##op##_problem* problem);            \
  KDA_API kda_status kda_##op##_run(const kda_##op##_problem* problem, int32_t backend, \
                                    int32_t kernel, void* stream);

#endif /* KDA_ARGS_H_ */

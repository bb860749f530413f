/* The argument tables of the operators: each operator's header lists its tensor arguments once,
 * as an X-macro `KDA_<OP>_ARGS(X)` with one `X(member, name, role, rank, doc)` per tensor, in
 * signature order (inputs as fla orders them, then the optional index tensors, then the
 * outputs). That one list declares the C and C++ problem structs' tensor members and drives
 * validation, the C ABI's argument tables (kda_op_arg), safetensors I/O and the command line.
 *   member  the struct member (`do_` for `do`, a C++ keyword)
 *   name    the argument's name in fla's signature and in safetensors files; outputs are
 *           "out.<name>" (the name under which they are returned)
 *   role    KDA_ARG_INPUT, KDA_ARG_OPTIONAL (an input that may be omitted), KDA_ARG_OUTPUT
 *   rank    the tensor's rank
 *   doc     shape and dtype, for messages and documentation */
#ifndef KDA_ARGS_H_
#define KDA_ARGS_H_

#define KDA_ARG_INPUT 0
#define KDA_ARG_OPTIONAL 1
#define KDA_ARG_OUTPUT 2

/* Declares a kda_tensor member for each entry of an argument table (C problem structs). */
#define KDA_DECLARE_C_TENSOR(member, name, role, rank, doc) kda_tensor member;

#endif /* KDA_ARGS_H_ */

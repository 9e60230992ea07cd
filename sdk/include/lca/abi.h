/* lca C ABI: the only thing that crosses between the host and a plugin library.
 * Used by the host (core/plugin) and by every plugin (through the C++ adapters in the lca headers).
 * Rule: every struct that crosses begins with uint32_t struct_size; new fields go at the end,
 * and a reader never touches a field beyond the struct_size it was given. */
#ifndef LCA_ABI_H
#define LCA_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Major changes break plugins; minor changes only add fields at the end of structs. */
#define LCA_ABI_VERSION_MAJOR 1u
#define LCA_ABI_VERSION_MINOR 1u
#define LCA_ABI_VERSION ((LCA_ABI_VERSION_MAJOR << 16) | LCA_ABI_VERSION_MINOR)
#define LCA_ABI_MAJOR_OF(v) ((uint32_t)(v) >> 16)
#define LCA_ABI_MINOR_OF(v) ((uint32_t)(v)&0xFFFFu)

/* The one symbol every plugin library exports. */
#define LCA_PLUGIN_ENTRY_SYMBOL "lca_plugin_entry"

#if defined(_WIN32)
#define LCA_ABI_EXPORT __declspec(dllexport)
#else
#define LCA_ABI_EXPORT __attribute__((visibility("default")))
#endif

/* ---- status ------------------------------------------------------------------------------ */
typedef enum lca_status {
  LCA_OK = 0,
  LCA_ERR_INVALID_ARGUMENT = 1, /* the caller passed something malformed */
  LCA_ERR_UNSUPPORTED = 2,      /* valid, but outside this plugin's capabilities */
  LCA_ERR_OUT_OF_MEMORY = 3,    /* the host allocator refused; the cell becomes E */
  LCA_ERR_DEVICE = 4,           /* a CUDA / driver / library call failed */
  LCA_ERR_COMM = 5,             /* a communicator operation failed */
  LCA_ERR_INTERNAL = 6          /* a bug or an exception caught at the boundary */
} lca_status;

typedef enum lca_plugin_kind {
  LCA_KIND_KERNEL = 1,
  LCA_KIND_MASK_PROVIDER = 2,
  LCA_KIND_CP_STRATEGY = 3
} lca_plugin_kind;

typedef enum lca_dtype {
  LCA_DTYPE_F32 = 0,
  LCA_DTYPE_F16 = 1,
  LCA_DTYPE_BF16 = 2,
  LCA_DTYPE_F64 = 3
} lca_dtype;

typedef enum lca_device_type { LCA_DEVICE_CPU = 0, LCA_DEVICE_CUDA = 1 } lca_device_type;

/* ---- masks --------------------------------------------------------------------------------- */
/* Inside the rectangle [q_begin,q_end) x [k_begin,k_end), with local indices i = q - q_begin,
 * j = k - k_begin, Lq = q_end - q_begin, Lk = k_end - k_begin, query i sees key j iff
 *   FULL:        always
 *   CAUSAL:      j <= i + (Lk - Lq)          (bottom-right aligned)
 *   INV_CAUSAL:  j >= i                      (top-left aligned)
 *   BI_CAUSAL:   i <= j <= i + (Lk - Lq)     (both)                                           */
typedef enum lca_slice_type {
  LCA_SLICE_FULL = 0,
  LCA_SLICE_CAUSAL = 1,
  LCA_SLICE_INV_CAUSAL = 2,
  LCA_SLICE_BI_CAUSAL = 3
} lca_slice_type;

/* Array element; its layout is frozen for ABI major 1 (arrays carry no struct_size per item).
 * Slices of one mask never overlap: a (q, k) cell is covered by at most one slice. */
typedef struct lca_slice {
  int64_t q_begin, q_end;
  int64_t k_begin, k_end;
  int32_t type; /* lca_slice_type */
  int32_t reserved;
} lca_slice;

/* Block-sparse form of a dynamic mask: query block b sees the key blocks
 * col_indices[row_offsets[b] .. row_offsets[b+1]) fully (CSR). */
typedef struct lca_block_sparse {
  uint32_t struct_size;
  int32_t block_q;
  int32_t block_k;
  int64_t num_q_blocks;
  int64_t num_k_blocks;
  const int64_t* row_offsets; /* num_q_blocks + 1 entries */
  const int64_t* col_indices; /* row_offsets[num_q_blocks] entries, ascending within a row */
} lca_block_sparse;

/* A mask over seqlen_q x seqlen_k packed tokens. Slices always describe it completely;
 * block_sparse is an optional second view of the same mask (NULL for static patterns). */
typedef struct lca_mask {
  uint32_t struct_size;
  int64_t seqlen_q;
  int64_t seqlen_k;
  int64_t num_slices;
  const lca_slice* slices;
  const lca_block_sparse* block_sparse;
  /* Documents, when the pattern is built from packed documents (varlen): num_docs + 1 token
   * offsets, cu_seqlens style. Kernels that take per-document lengths natively use these. */
  int64_t num_docs;
  const int64_t* doc_offsets;
} lca_mask;

/* ---- tensors, problems, execution ---------------------------------------------------------- */
/* Packed tokens, THD: shape {tokens, heads, head_dim}; strides in elements. LSE tensors are
 * fp32 {heads, tokens, 1}. */
typedef struct lca_tensor {
  uint32_t struct_size;
  int32_t dtype;       /* lca_dtype */
  void* data;          /* device pointer on CUDA, host pointer on CPU */
  int64_t shape[3];
  int64_t stride[3];
} lca_tensor;

typedef struct lca_problem {
  uint32_t struct_size;
  int32_t dtype;       /* of Q, K, V, O and gradients */
  int32_t device_type; /* lca_device_type */
  int32_t device_index;
  int64_t seqlen_q;
  int64_t seqlen_k;
  int32_t heads_q;
  int32_t heads_kv;    /* heads_q % heads_kv == 0 (GQA) */
  int32_t head_dim;
  float softmax_scale; /* usually 1/sqrt(head_dim) */
} lca_problem;

/* Device memory (or host memory on CPU) through the host, so that the host measures peaks. */
typedef struct lca_allocator {
  uint32_t struct_size;
  void* ctx;
  /* Returns LCA_ERR_OUT_OF_MEMORY (and *out = NULL) when the request cannot be met. */
  lca_status (*alloc)(void* ctx, size_t bytes, void** out);
  void (*free)(void* ctx, void* ptr);
} lca_allocator;

typedef struct lca_exec {
  uint32_t struct_size;
  void* stream;                    /* cudaStream_t on CUDA, NULL on CPU */
  const lca_allocator* allocator;  /* never NULL */
  int32_t num_threads;             /* CPU plugins: threads they may use (0 = their choice) */
} lca_exec;

typedef struct lca_fwd_args {
  uint32_t struct_size;
  lca_tensor q, k, v; /* in */
  lca_tensor o;       /* out, same dtype as q */
  lca_tensor lse;     /* out, fp32 natural-log sum-exp of the scaled scores; -inf on empty rows */
} lca_fwd_args;

typedef struct lca_bwd_args {
  uint32_t struct_size;
  lca_tensor q, k, v, o, d_o, lse; /* in */
  lca_tensor dq, dk, dv;           /* out, overwritten (not accumulated) */
} lca_bwd_args;

/* Logging back into the host's logger. level: 0 trace .. 5 critical. */
typedef void (*lca_log_fn)(void* ctx, int32_t level, const char* message);

/* What the host tells a plugin when it creates an object. */
typedef struct lca_host_info {
  uint32_t struct_size;
  uint32_t abi_version;     /* the host's LCA_ABI_VERSION */
  const char* plugin_dir;   /* folder of the plugin's .so and manifest (data files live there) */
  const char* data_dir;     /* shared data folder (distributions), may be NULL */
  const char* config_json;  /* plugin options as a JSON object, "{}" when none */
  lca_log_fn log;           /* may be NULL */
  void* log_ctx;
} lca_host_info;

/* ---- kernels -------------------------------------------------------------------------------- */
typedef struct lca_kernel lca_kernel;  /* opaque, made and destroyed by the plugin */
typedef struct lca_plan lca_plan;      /* opaque, made and destroyed by the plugin */

/* Lifetime: create -> plan (any number) -> forward/backward on a plan -> destroy_plan ->
 * destroy. A plan must not outlive its kernel, nor the mask arrays it was given. Everything a
 * plan allocates through exec->allocator it frees in destroy_plan. */
typedef struct lca_kernel_vtable {
  uint32_t struct_size;
  uint32_t abi_version;
  lca_status (*create)(const lca_host_info* host, lca_kernel** out);
  void (*destroy)(lca_kernel* kernel);
  /* All mask preprocessing and workspace sizing happen here, outside the timed region. */
  lca_status (*plan)(lca_kernel* kernel, const lca_problem* problem, const lca_mask* mask,
                     const lca_exec* exec, lca_plan** out);
  void (*destroy_plan)(lca_kernel* kernel, lca_plan* plan, const lca_exec* exec);
  lca_status (*forward)(lca_kernel* kernel, lca_plan* plan, const lca_fwd_args* args,
                        const lca_exec* exec);
  /* NULL when the kernel has no backward pass. */
  lca_status (*backward)(lca_kernel* kernel, lca_plan* plan, const lca_bwd_args* args,
                         const lca_exec* exec);
  /* The message of the last failing call on this thread (never NULL). */
  const char* (*last_error)(void);
  /* ABI 1.1. Facts about a plan and the calls made on it so far, as one JSON object, e.g. a
   * JIT's compile time spent in plan() or memory a library allocated outside exec->allocator.
   * The host reads it after a cell's timed calls and records it with the cell ("plan_info").
   * NULL (the pointer or the result) when there is none; the string stays valid until the next
   * call on this thread. Hosts read it only where struct_size covers it. */
  const char* (*plan_info)(lca_kernel* kernel, lca_plan* plan);
} lca_kernel_vtable;

/* ---- mask providers ------------------------------------------------------------------------- */
typedef struct lca_mask_provider lca_mask_provider;
typedef struct lca_mask_handle lca_mask_handle;

typedef struct lca_mask_request {
  uint32_t struct_size;
  const char* pattern;      /* e.g. "causal_document" */
  const char* params_json;  /* JSON object of parameters, "{}" for defaults */
  int64_t seqlen;           /* total tokens (q and k) */
  uint64_t seed;            /* same seed, same mask, on every machine */
} lca_mask_request;

typedef struct lca_mask_provider_vtable {
  uint32_t struct_size;
  uint32_t abi_version;
  lca_status (*create)(const lca_host_info* host, lca_mask_provider** out);
  void (*destroy)(lca_mask_provider* provider);
  /* JSON array describing the patterns: [{name, category, params:[{name,type,default,doc}]}].
   * The string lives as long as the provider. */
  const char* (*describe)(lca_mask_provider* provider);
  lca_status (*generate)(lca_mask_provider* provider, const lca_mask_request* request,
                         lca_mask_handle** out);
  /* Valid until release(handle). */
  const lca_mask* (*get)(lca_mask_handle* handle);
  void (*release)(lca_mask_provider* provider, lca_mask_handle* handle);
  const char* (*last_error)(void);
} lca_mask_provider_vtable;

/* ---- communicators (implemented by the host) ------------------------------------------------ */
typedef enum lca_reduce_op { LCA_REDUCE_SUM = 0, LCA_REDUCE_MAX = 1 } lca_reduce_op;

typedef struct lca_comm lca_comm; /* opaque, owned by the host */

/* Counts and displacements are in elements of dtype. On CUDA every operation is enqueued on
 * `stream`; on CPU stream is NULL and calls complete before returning. send/recv between
 * group_start/group_end are issued together (NCCL group semantics). */
typedef struct lca_comm_vtable {
  uint32_t struct_size;
  uint32_t abi_version;
  int32_t (*rank)(lca_comm* comm);
  int32_t (*size)(lca_comm* comm);
  /* Collective: ranks with the same color form a new communicator ordered by key. The result
   * is released with free_comm. */
  lca_status (*split)(lca_comm* comm, int32_t color, int32_t key, lca_comm** out);
  void (*free_comm)(lca_comm* comm);
  lca_status (*all_to_all)(lca_comm* comm, const void* send, const int64_t* send_counts,
                           const int64_t* send_displs, void* recv, const int64_t* recv_counts,
                           const int64_t* recv_displs, int32_t dtype, void* stream);
  lca_status (*all_gather)(lca_comm* comm, const void* send, void* recv, int64_t count,
                           int32_t dtype, void* stream);
  lca_status (*reduce_scatter)(lca_comm* comm, const void* send, void* recv, int64_t count,
                               int32_t dtype, int32_t op, void* stream);
  lca_status (*all_reduce)(lca_comm* comm, const void* send, void* recv, int64_t count,
                           int32_t dtype, int32_t op, void* stream);
  lca_status (*group_start)(lca_comm* comm);
  lca_status (*group_end)(lca_comm* comm);
  lca_status (*send)(lca_comm* comm, const void* buf, int64_t count, int32_t dtype,
                     int32_t peer, void* stream);
  lca_status (*recv)(lca_comm* comm, void* buf, int64_t count, int32_t dtype, int32_t peer,
                     void* stream);
  lca_status (*barrier)(lca_comm* comm, void* stream);
  /* Topology from the launcher: ranks per node (intra-node group size). */
  int32_t (*local_size)(lca_comm* comm);
  const char* (*last_error)(void);
} lca_comm_vtable;

typedef struct lca_comm_ref {
  uint32_t struct_size;
  const lca_comm_vtable* vtable;
  lca_comm* comm;
} lca_comm_ref;

/* A kernel instance the host lends to a CP strategy for its local blocks. */
typedef struct lca_kernel_ref {
  uint32_t struct_size;
  const lca_kernel_vtable* vtable;
  lca_kernel* kernel;
} lca_kernel_ref;

/* ---- context-parallel strategies ------------------------------------------------------------ */
typedef struct lca_cp_strategy lca_cp_strategy;
typedef struct lca_cp_plan lca_cp_plan;

/* Token ranges [begin, end) of the global sequence a rank holds, in the order they are packed
 * in that rank's local buffers. */
typedef struct lca_token_range {
  int64_t begin, end;
} lca_token_range;

typedef struct lca_cp_config {
  uint32_t struct_size;
  lca_comm_ref world;
  lca_kernel_ref kernel;
  const lca_problem* problem; /* the global problem */
  const lca_mask* mask;       /* the global mask */
  const char* options_json;   /* strategy options (degrees, ...), "{}" for defaults */
} lca_cp_config;

typedef struct lca_cp_strategy_vtable {
  uint32_t struct_size;
  uint32_t abi_version;
  lca_status (*create)(const lca_host_info* host, lca_cp_strategy** out);
  void (*destroy)(lca_cp_strategy* strategy);
  /* Collective over config->world. Mask splitting and schedules happen here. */
  lca_status (*plan)(lca_cp_strategy* strategy, const lca_cp_config* config,
                     const lca_exec* exec, lca_cp_plan** out);
  void (*destroy_plan)(lca_cp_strategy* strategy, lca_cp_plan* plan, const lca_exec* exec);
  /* How tokens are dispatched: fills up to `capacity` ranges for `rank`, sets *count. Call
   * with ranges == NULL to learn the count. */
  lca_status (*dispatch)(lca_cp_strategy* strategy, lca_cp_plan* plan, int32_t rank,
                         lca_token_range* ranges, int64_t capacity, int64_t* count);
  /* Local tensors hold this rank's tokens (dispatch order), all heads. */
  lca_status (*forward)(lca_cp_strategy* strategy, lca_cp_plan* plan, const lca_fwd_args* args,
                        const lca_exec* exec);
  lca_status (*backward)(lca_cp_strategy* strategy, lca_cp_plan* plan,
                         const lca_bwd_args* args, const lca_exec* exec);
  const char* (*last_error)(void);
} lca_cp_strategy_vtable;

/* ---- the entry point ------------------------------------------------------------------------ */
typedef struct lca_plugin_descriptor {
  uint32_t struct_size;
  uint32_t abi_version; /* LCA_ABI_VERSION the plugin was built with */
  int32_t kind;         /* lca_plugin_kind */
  const char* name;     /* must equal the manifest's name */
  const char* version;  /* semver string */
  /* Exactly one is non-NULL, matching kind. */
  const lca_kernel_vtable* kernel;
  const lca_mask_provider_vtable* mask_provider;
  const lca_cp_strategy_vtable* cp_strategy;
} lca_plugin_descriptor;

typedef const lca_plugin_descriptor* (*lca_plugin_entry_fn)(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* LCA_ABI_H */

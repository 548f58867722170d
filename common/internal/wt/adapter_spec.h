/* wt/adapter_spec.h: LoRA adapter sets (docs/lora.md).
 *
 * A server holds, beside its model, named adapter sets, each with its own
 * versions and rounds. A set is what PEFT saves: per target module a
 * "<prefix>.<module>.lora_A.weight" of shape [rank, in] and a
 * "<prefix>.<module>.lora_B.weight" of shape [out, rank]. The trainer
 * describes it (a wt.v1.AdapterSpec: name, rank, alpha, target modules,
 * tensors) in the init of its first round; every later init must describe
 * the same set. The rules live here once: the client completes a spec from
 * its source (wt_adapter_spec_complete), the server checks what arrives
 * (wt_adapter_spec_check) and compares later specs with the first
 * (wt_adapter_spec_same).
 *
 * Not installed: libwt_server and libwt_client share it through
 * libwt_common.
 */
#ifndef WT_ADAPTER_SPEC_H
#define WT_ADAPTER_SPEC_H

#include <stddef.h>
#include <stdint.h>

#include "wt/status.h"
#include "wt/tensor.h"
#include "wt/v1/wt.pb-c.h"
#include "wt/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

WT_API_BEGIN

/* Limits a spec (a stranger's init) is held to. */
#define WT_ADAPTER_NAME_MAX 64
#define WT_ADAPTER_MAX_TENSORS 65536
#define WT_ADAPTER_MAX_RANK 65536
#define WT_ADAPTER_TENSOR_NAME_MAX 1024
#define WT_ADAPTER_MAX_TARGETS 1024

/* `name` is 1..WT_ADAPTER_NAME_MAX bytes of [A-Za-z0-9_-]; else
 * INVALID_ARGUMENT naming `what` (the field or option that held it). */
wt_status *wt_adapter_name_check(const char *name, const char *what);

/* Checks `spec` (borrowed): its name; 1..WT_ADAPTER_MAX_TENSORS tensors,
 * each a lora_A or lora_B in PEFT's naming, two-dimensional, a floating
 * dtype, every module with both, each name once; rank 1..MAX_RANK and
 * equal to every lora_A's rows and lora_B's columns; alpha finite and
 * positive; target_modules the modules' last names (any order, each
 * once). INVALID_ARGUMENT naming the adapter and the tensor or field. On
 * success *metas (n_out of them, in the spec's order; free with
 * wt_tensor_meta_array_free) is the set's layout; metas may be NULL. */
wt_status *wt_adapter_spec_check(const Wt__V1__AdapterSpec *spec,
                                 wt_tensor_meta **metas, size_t *n_out);

/* Whether `spec` (checked) describes the set `first` (checked) made: the
 * same rank, alpha, target modules and tensors (names, dtypes, shapes; any
 * order). FAILED_PRECONDITION naming the adapter and the first tensor or
 * field that differs, with both values. */
wt_status *wt_adapter_spec_same(const Wt__V1__AdapterSpec *first,
                                const Wt__V1__AdapterSpec *spec);

/* Fills what a trainer may leave out of `spec`, a message the system
 * allocator owns (from an unpack; what it adds is malloc'd, so
 * protobuf_c_message_free_unpacked frees it): the tensors from
 * metas[0..n) when it lists none, the rank from the first lora_A when 0,
 * the target modules from the names when empty. Then checks it
 * (wt_adapter_spec_check). */
wt_status *wt_adapter_spec_complete(Wt__V1__AdapterSpec *spec,
                                    const wt_tensor_meta *metas, size_t n);

WT_API_END

#ifdef __cplusplus
}
#endif

#endif /* WT_ADAPTER_SPEC_H */

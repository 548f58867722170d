/* update_step.h: a trainer's step as it changes a model's bytes, for
 * wt-push --change and bench/delta_bench.sh (docs/delta.md says why this
 * shape).
 *
 * RL trainers keep fp32 master weights and send bf16 (or fp16) copies.
 * One optimizer step moves each master weight by lr * update, far below a
 * bf16 unit in the last place (ulp) for RL's learning rates, so the bf16
 * copy of an element changes only when its master crosses a rounding
 * boundary: independently for each element, with a probability that is
 * the step's size in ulps, by one ulp (sometimes two or three), up or
 * down. wt_update_step changes a `fraction` of the elements of every
 * tensor that way: positions drawn as independent Bernoulli trials
 * (geometric gaps), 90 percent by one ulp, 10 percent by two or three, the
 * sign at random. fp32 tensors (norms) change their low mantissa bits the
 * same way. fraction 1 is the random-noise case: every byte new. */
#ifndef WT_UPDATE_STEP_H
#define WT_UPDATE_STEP_H

#include <stddef.h>
#include <stdint.h>

#include "wt/tensor.h"

/* Changes tensor bytes data[0..m->nbytes) for step `step` (the same step
 * and seed change the same elements). */
void wt_update_step(const wt_tensor_meta *m, void *data, double fraction,
                    uint64_t seed, uint64_t step);

#endif

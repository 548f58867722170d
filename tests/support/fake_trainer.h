/* fake_trainer.h: trainer engines for tests, the trainer-side twin of
 * fake_engine.h, registered once in the process's trainer registry by
 * fake_trainer_register():
 *
 *   "test-async"       needs UpdateWeights; send_weights blocks until the
 *                      client cancels it (10 s at most), to exercise the
 *                      client's cancel of a sender whose server failed
 *   "fake-fragile"     needs UpdateWeights; send_weights lets the fake
 *                      engines' receives go on (fake_engine_release)
 *   "test-half-parts"  a table with parts but no prepare_part: refused
 *                      when an engine is made
 */
#ifndef WT_TEST_FAKE_TRAINER_H
#define WT_TEST_FAKE_TRAINER_H

#include <stdbool.h>

#include "wt/trainer.h"

typedef struct fake_trainer_stats {
  int inits;        /* trainer_init calls, every fake */
  int update_infos; /* update_info calls */
  bool cancelled;   /* the client cancelled a send */
} fake_trainer_stats;

/* Registers the fakes (once per process; later calls do nothing). */
void fake_trainer_register(void);
/* Counters to zero, not cancelled. */
void fake_trainer_reset(void);
fake_trainer_stats fake_trainer_get_stats(void);

#endif /* WT_TEST_FAKE_TRAINER_H */

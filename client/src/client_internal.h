/* client_internal.h: what the sync client and the trainer handle share.
 * Not installed. */
#ifndef WT_CLIENT_INTERNAL_H
#define WT_CLIENT_INTERNAL_H

#include "wt/client.h"
#include "wt/trainer.h"

#include "wt/visibility.h"

/* The client re-inits this trainer itself when a server needs it (its
 * engine is replaced in place, the handle stays); both forget each other
 * when either is destroyed. */
WT_HIDDEN void wt_trainer_attach(wt_trainer *t, wt_sync_client *c);
WT_HIDDEN void wt_sync_client_forget_trainer(wt_sync_client *c,
                                                    wt_trainer *t);
WT_HIDDEN void wt_trainer_forget_client(wt_trainer *t);

/* Destroys t's engine and creates a new one from `args` (trainer_init);
 * on failure t has no engine (send_weights then fails) until the next
 * success. */
WT_HIDDEN wt_status *wt_trainer_reinit(wt_trainer *t,
                                              const wt_trainer_init_args *args);

#endif /* WT_CLIENT_INTERNAL_H */

# ucx: RDMA or TCP through UCX, linked: built when UCX is found.
wt_backend(NAME ucx WHEN WT_WITH_UCX
  SHARED ucx_shared.c
  WORKER ucx_worker.c ucx_worker_conn.c ucx_worker_socks.c ucx_worker_delta.c
         ucx_worker_chain.c
  TRAINER ucx_trainer.c ucx_trainer_conn.c ucx_trainer_send.c
          ucx_trainer_chain.c)

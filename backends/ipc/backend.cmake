# ipc: CUDA IPC on one host (CUDA only through wt/cuda.h, loaded on first
# use, so the backend is always built).
wt_backend(NAME ipc
  SHARED ipc_shared.c
  WORKER ipc_worker.c
  TRAINER ipc_trainer.c)

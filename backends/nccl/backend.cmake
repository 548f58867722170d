# nccl: NCCL broadcasts from the trainer, rank 0 (NCCL only through
# wt/nccl_seam.h, loaded on first use, so the backend is always built).
wt_backend(NAME nccl
  SHARED nccl_shared.c
  WORKER nccl_worker.c
  TRAINER nccl_trainer.c)

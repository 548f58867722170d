/* grpc_trainer.c: placeholder, being written. */

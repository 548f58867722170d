/* pb.c: placeholder, being written. */

/* tensor.c: placeholder, being written. */

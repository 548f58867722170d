/* wt_push.c: placeholder, being written. */
int main(void) { return 1; }

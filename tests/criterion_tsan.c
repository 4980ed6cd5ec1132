/*
 * ThreadSanitizer builds only: lets Criterion start under TSan.
 *
 * Criterion (BoxFort's arena, boxfort/src/arena.c) maps its inheritable arena
 * with MAP_FIXED at 0x200000000000 + (rand_r() & 0x3fffff) * 16 MiB and gives
 * up after 10 tries whose pages are already mapped. Under TSan almost all of
 * that range is TSan's shadow or protected gaps, so every try fails and the
 * test binary aborts with "Could not initialize inheritable arena: Resource
 * temporarily unavailable" (Snaipe/Criterion issue 274). Its one rand_r call
 * is the arena's; this definition (the executable's symbol interposes libc's
 * for libcriterion.so) keeps its picks inside TSan's application range for
 * PIE binaries, 0x550000000000-0x568000000000, which the arena's own "already
 * mapped" check and retries handle. Nothing in libdetshare or the tests calls
 * rand_r. Not compiled into non-TSan builds.
 */
#if defined(__SANITIZE_THREAD__)
#include <stdlib.h>

int rand_r(unsigned int *seed)
{
    /* glibc's LCG step, so successive picks differ */
    unsigned int x = *seed * 1103515245u + 12345u;
    *seed = x;
    /* slots of 16 MiB: 0x350000 -> 0x550000000000, 0x18000 slots = 1.5 TiB */
    return (int)(0x350000u + (x >> 8) % 0x18000u);
}
#else
typedef int ds_tests_criterion_tsan_unused;
#endif

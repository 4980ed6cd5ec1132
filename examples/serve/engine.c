/* Pieces of engine.h shared by both back ends. */
#include "engine.h"

uint32_t serve_bucket(uint32_t bs, uint32_t max_batch)
{
    uint32_t b;
    if (bs <= 1)
        b = 1;
    else if (bs <= 2)
        b = 2;
    else if (bs <= 4)
        b = 4;
    else
        b = (bs + 7u) / 8u * 8u;
    return b > max_batch ? max_batch : b;
}

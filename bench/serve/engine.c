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

uint32_t serve_bucket_index(uint32_t bs, uint32_t max_batch)
{
    uint32_t want = serve_bucket(bs, max_batch), i = 0;
    for (uint32_t b = serve_bucket(1, max_batch); b < want; i++)
        b = serve_bucket(b + 1, max_batch);
    return i;
}

uint32_t serve_bucket_count(uint32_t max_batch) { return serve_bucket_index(max_batch, max_batch) + 1; }

uint32_t serve_bucket_at(uint32_t i, uint32_t max_batch)
{
    uint32_t b = serve_bucket(1, max_batch);
    while (i-- > 0 && b < max_batch)
        b = serve_bucket(b + 1, max_batch);
    return b;
}

#include "migrate/handoff.h"

CUresult ds__migrate_handoff(const ds__driver *cu, CUevent ev, CUstream from, CUstream to)
{
    CUresult r = cu->cuEventRecord(ev, from);
    if (r == CUDA_SUCCESS)
        r = cu->cuStreamWaitEvent(to, ev, 0);
    return r;
}

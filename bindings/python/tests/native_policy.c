/* Policies written in C for the binding's tests (compiled by conftest.py):
 * registered from Python with Runtime.register_native_policy. */
#include <detshare/policy.h>

/* Every launch goes to pCtx 1; counts its calls in *(int *)state. */
__attribute__((visibility("default"))) ds_status test_pin1_init(void *user, ds_runtime_t rt, void **state)
{
    (void)rt;
    *state = user;
    return DS_SUCCESS;
}

__attribute__((visibility("default"))) ds_decision test_pin1_on_launch(void *state, const ds_policy_view *view,
                                                                       const ds_launch_event *ev)
{
    (void)view;
    (void)ev;
    if (state)
        (*(int *)state)++;
    return (ds_decision){.kind = DS_DISPATCH_REMAP, .pctx = 1};
}

/* Holds every launch forever (100 us at a time): the runtime gives up with
 * DS_ERR_TIMEOUT after its teardown timeout. */
__attribute__((visibility("default"))) ds_decision test_hold_on_launch(void *state, const ds_policy_view *view,
                                                                       const ds_launch_event *ev)
{
    (void)state;
    (void)view;
    (void)ev;
    return (ds_decision){.kind = DS_DISPATCH_HOLD, .hold_us = 100};
}

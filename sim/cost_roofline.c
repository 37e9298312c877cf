#include "sim/cost_impl.h"
cost_model *cost_roofline_parse(json_t *root, const cost_src *src, rh_err *e)
{
    (void)root;
    rh_fail(e, "%s: roofline: not yet", src->label);
    return NULL;
}

/* test_calibrate_live_http.c — the live half of test_calibrate_live.c: the
 * secret-physics campaign over HTTP (serve --backend sim with a noisy
 * secret, probe, fit, held-out validate --measured), a suite of its own so
 * the suite runner runs it beside the simulated half. */
#include <CUnit/CUnit.h>
#include <stdlib.h>

void test_calibrate_secret_physics_live(void);

static int init_presets(void)
{
    return setenv("REHEARSE_PRESETS", "sim/cost/presets", 1);
}

void register_test_calibrate_live_http(void)
{
    CU_pSuite s = CU_add_suite("calibrate against a live server, over HTTP", init_presets, NULL);
    CU_add_test(s, "secret physics, live: probe, fit and held-out validate --measured over HTTP",
                test_calibrate_secret_physics_live);
}

/*
 * test_metrics.c - the Prometheus exposition: counters by label, cumulative histogram buckets.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "../server/metrics.h"

/* Every line of want is in the exposition text; frees text and m. */
static void expect_lines(nd_metrics *m, char *text, const char *const *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        cr_assert(strstr(text, want[i]), "missing %s in:\n%s", want[i], text);
    free(text);
    nd_metrics_destroy(m);
}

Test(metrics, counters_and_histograms_render_in_prometheus_text)
{
    nd_metrics *m = nd_metrics_create();
    nd_metrics_set_device_label(m, 0, "cpu");
    nd_metrics_request(m, ND_OP_SOFTMAX, 200, 0.0002);
    nd_metrics_request(m, ND_OP_SOFTMAX, 200, 0.003);
    nd_metrics_request(m, ND_OP_SOFTMAX, 400, 0.0001);
    nd_metrics_request(m, ND_METRICS_OP_OTHER, 404, 0.0001);
    nd_metrics_request(m, ND_OP_PRELU, 418, 0.0001);
    nd_metrics_batch(m, ND_OP_SOFTMAX, 0, 3, 2, 0.0001, 0.001, 0);
    nd_metrics_batch(m, ND_OP_SOFTMAX, 0, 100, 5, 0.0001, 0.001, 1);
    nd_metrics_queue_depth_add(m, 3);
    nd_metrics_queue_depth_add(m, -1);
    nd_metrics_transfer(m, 0, 1000, 2000);
    size_t len;
    char *text = nd_metrics_render(m, &len);
    cr_assert_not_null(text);
    cr_assert_eq(strlen(text), len);
    const char *want[] = {
        "normd_requests_total{op=\"softmax\",code=\"200\"} 2\n",
        "normd_requests_total{op=\"softmax\",code=\"400\"} 1\n",
        "normd_requests_total{op=\"other\",code=\"404\"} 1\n",
        "normd_requests_total{op=\"prelu\",code=\"4xx\"} 1\n",
        "normd_batches_total{op=\"softmax\"} 2\n",
        "normd_batch_failures_total{op=\"softmax\"} 1\n",
        "normd_batch_rows_bucket{le=\"2\"} 0\n",
        "normd_batch_rows_bucket{le=\"4\"} 1\n",
        "normd_batch_rows_bucket{le=\"128\"} 2\n",
        "normd_batch_rows_bucket{le=\"+Inf\"} 2\n",
        "normd_batch_rows_sum 103\n",
        "normd_request_duration_seconds_count 4\n", /* operator requests only */
        "normd_request_duration_seconds_bucket{le=\"0.00025\"} 3\n",
        "normd_queue_depth 2\n",
        "normd_device_h2d_bytes_total{device=\"cpu\"} 1000\n",
        "normd_device_d2h_bytes_total{device=\"cpu\"} 2000\n",
        "normd_device_batch_errors_total{device=\"cpu\"} 1\n",
        "normd_device_compute_seconds_count{device=\"cpu\"} 2\n",
    };
    expect_lines(m, text, want, sizeof want / sizeof want[0]);
}

/* Each request's stages land in normd_request_stage_seconds{stage}; a stage it did not pass
 * (0: a host backend has no h2d/kernel/d2h, a failed batch no output) is not observed, while a
 * successful request's queue stage is, even when it took no measurable time. */
Test(metrics, request_stages_observe_only_the_stages_passed)
{
    nd_metrics *m = nd_metrics_create();
    const nd_stage_times gpu = {.queue = 3e-6, .input = 7e-6, .compute = 40e-6, .submit = 12e-6,
                                .h2d = 8e-6, .kernel = 20e-6, .d2h = 0, .output = 6e-6,
                                .wakeup = 30e-6, .total = 150e-6};
    const nd_stage_times host = {.queue = 0, .input = 4e-6, .compute = 2e-6, .output = 3e-6,
                                 .wakeup = 600e-6, .total = 700e-6};
    const nd_stage_times failed = {.queue = 1e-3, .input = 1e-6, .total = 2e-3};
    nd_metrics_job(m, ND_OP_LAYERNORM, 1, &gpu);
    nd_metrics_job(m, ND_OP_LAYERNORM, 1, &host);
    nd_metrics_job(m, ND_OP_RMSNORM, 0, &failed);
    size_t len;
    char *text = nd_metrics_render(m, &len);
    cr_assert_not_null(text);
    const char *want[] = {
        "normd_request_stage_seconds_count{stage=\"queue\"} 3\n",
        "normd_request_stage_seconds_count{stage=\"input\"} 3\n",
        "normd_request_stage_seconds_count{stage=\"compute\"} 2\n",
        "normd_request_stage_seconds_count{stage=\"submit\"} 1\n",
        "normd_request_stage_seconds_count{stage=\"h2d\"} 1\n",
        "normd_request_stage_seconds_count{stage=\"kernel\"} 1\n",
        "normd_request_stage_seconds_count{stage=\"d2h\"} 0\n",
        "normd_request_stage_seconds_count{stage=\"output\"} 2\n",
        "normd_request_stage_seconds_count{stage=\"wakeup\"} 2\n",
        "normd_request_stage_seconds_count{stage=\"total\"} 3\n",
        /* microsecond buckets: the 8 us copy in is in le=1e-05 and not in le=5e-06 */
        "normd_request_stage_seconds_bucket{stage=\"h2d\",le=\"5e-06\"} 0\n",
        "normd_request_stage_seconds_bucket{stage=\"h2d\",le=\"1e-05\"} 1\n",
        "normd_request_stage_seconds_bucket{stage=\"wakeup\",le=\"5e-05\"} 1\n",
        "normd_request_stage_seconds_bucket{stage=\"wakeup\",le=\"0.001\"} 2\n",
    };
    expect_lines(m, text, want, sizeof want / sizeof want[0]);
}

#include "device.h"

#include <stdio.h>

#include "../base/util.h"

Backend* device_open(int device, int precision, const char* context) {
    char prefix[300] = "";
    if (context) snprintf(prefix, sizeof(prefix), "%s: ", context);
    const char* why = backend_device_refusal(device);
    if (why) die("%s%s", prefix, why);
    Backend* be = backend_open(device, precision, &why);
    if (!be) die("%skey 'precision': %s", prefix, why);
    return be;
}

Backend* device_open_run(const Config* cfg) { return device_open(cfg->device, cfg->precision, NULL); }

Backend* device_open_eval(const Config* cfg) { return device_open(cfg->device, PRECISION_FP32, NULL); }

Backend* device_open_option(const char* name, const char* option) {
    int device = backend_device_index(name);
    if (device < 0) die("option %s: '%.40s' is not one of cpu, cuda", option, name);
    return device_open(device, PRECISION_FP32, NULL);
}

Backend* device_open_host(void) { return device_open(0, PRECISION_FP32, NULL); }  // BACKEND_DEVICES[0]
